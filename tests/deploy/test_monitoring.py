"""deploy/monitoring: the ServiceMonitor, the alert rules and the Grafana dashboard speak the
service's own metrics. Every PromQL expression parses, and every metric, label and label value it
names is one the service exports (read from a live registry, not a list kept here); thresholds
follow the settings the manifests deploy; the CRDs pass the Prometheus Operator's schemas; where
Debian's promtool is installed it checks the rules and runs their unit tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.engine.kernels.runtime import KERNELS, KernelReport
from app.http.metrics import LATENCY_BUCKETS, Metrics
from app.http.routes import documents, health, libretranslate, metrics, models, translate, web
from app.translation.batcher import BatchStats
from tests.deploy.kustomize import render
from tests.deploy.test_kubernetes import KUBE, kustomize_command

promql = pytest.importorskip("promql_parser", reason="promql-parser (the dev extra) is missing")

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = json.loads((MONITORING / "grafana-dashboard.json").read_text())
# labels Prometheus adds to every scraped series (the ServiceMonitor's targets)
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "container", "endpoint"}
ALERTS = {"NmtQueueSaturated", "NmtHighErrorRate", "NmtPodNotReady", "NmtNoReadyReplica",
          "NmtHighLatency"}


def exported() -> dict[str, set[str]]:
    """Sample name -> its label names, from the service's registry after each labelled metric
    has a child (a labelled metric with none exports no sample)."""
    m = Metrics()
    m.requests.labels("/v1/translate", "POST", "200").inc()
    m.latency.labels("/v1/translate").observe(0.1)
    m.rejected.labels("overloaded").inc()
    for ok in (True, False):
        m.observe_batch(BatchStats("en-de", 2, 16, 10, 12, 0.5, ok))
    m.worker_processes.source = lambda: [("en-de", 2, 2)]
    m.kernels.report = KernelReport("cpu", None, KERNELS[:1], dict.fromkeys(KERNELS[1:], "-"))
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


EXPORTED = exported()


def label_values() -> dict[str, set[str]]:
    """Values a label can take, where the service fixes them."""
    routes = {route.path for module in (translate, documents, models, libretranslate, health,
                                        metrics, web) for route in module.router.routes}
    return {
        "route": routes | {"unmatched"},
        "status": {str(code) for code in range(100, 600)},
        "outcome": {"ok", "error"},  # Metrics.observe_batch
        "kind": {"source", "output"},
        "kernel": set(KERNELS),
        "le": {str(float(b)) for b in LATENCY_BUCKETS} | {"+Inf"},
    }


LABEL_VALUES = label_values()


def substitute_grafana_variables(expr: str) -> str:
    """A dashboard query as Prometheus would get it: $__rate_interval a duration, every other
    variable (namespace, job) a match-all regex."""
    return re.sub(r"\$[A-Za-z_]+", ".*", expr.replace("$__rate_interval", "5m"))


def problems(expr: str) -> list[str]:
    """What in a PromQL expression the service does not export: unknown metric names, label
    names a metric lacks, label values the service never sets. Raises on a syntax error."""
    found: list[str] = []
    tree = promql.parse(expr)

    def selectors(node) -> list:
        out: list = []
        promql.walk(node, lambda n: out.append(n) if isinstance(n, promql.VectorSelector)
                    else None)
        return out

    def visit(node) -> None:
        if isinstance(node, promql.VectorSelector):
            if node.name not in EXPORTED:
                found.append(f"metric {node.name} is not exported")
                return
            allowed = EXPORTED[node.name] | TARGET_LABELS
            for matcher in node.matchers.matchers:
                if matcher.name not in allowed:
                    found.append(f"{node.name} has no label {matcher.name}")
                known = LABEL_VALUES.get(matcher.name)
                if known is None or matcher.op not in (promql.MatchOp.Equal, promql.MatchOp.Re):
                    continue
                hits = ({matcher.value} & known if matcher.op == promql.MatchOp.Equal
                        else {v for v in known if re.fullmatch(matcher.value, v)})
                if not hits:
                    found.append(f"{node.name}{{{matcher.name}}} never is {matcher.value!r}")
        elif isinstance(node, promql.AggregateExpr) and node.modifier is not None:
            allowed = set(TARGET_LABELS)
            for selector in selectors(node.expr):
                allowed |= EXPORTED.get(selector.name, set())
            missing = set(node.modifier.labels) - allowed
            if missing:
                found.append(f"aggregation by {sorted(missing)}: no such label below it")

    promql.walk(tree, visit)
    return found


def rules() -> list[dict]:
    (rule,) = [r for r in render(MONITORING) if r["kind"] == "PrometheusRule"]
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def dashboard_queries() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in DASHBOARD["panels"]
            for target in panel["targets"]]


def base() -> dict[str, dict]:
    return {r["kind"]: r for r in render(KUBE / "base")}


# ------------------------------------------------------------------------------- PromQL


def test_the_registry_read_covers_every_metric_of_the_service():
    families = {name.removesuffix("_total") for name in EXPORTED}
    assert {"nmt_http_requests", "nmt_http_request_duration_seconds_bucket", "nmt_queue_depth",
            "nmt_batch_size_bucket", "nmt_tokens", "nmt_rejected_requests", "nmt_ready",
            "nmt_lane_processes", "nmt_lane_process_starts", "nmt_kernel_active"} <= families


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
def test_alert_expressions_use_only_exported_metrics_and_labels(rule):
    assert problems(rule["expr"]) == []


@pytest.mark.parametrize(("title", "expr"), dashboard_queries())
def test_dashboard_queries_use_only_exported_metrics_and_labels(title, expr):
    assert problems(substitute_grafana_variables(expr)) == [], title


@pytest.mark.parametrize(("mutation", "complaint"), [
    (("nmt_queue_depth", "nmt_queue_dept"), "metric nmt_queue_dept is not exported"),
    (("nmt_http_requests_total", "nmt_http_request_total"), "not exported"),
    (('route=~"/v1/translate|/translate"', 'route=~"/v2/translate"'), "never is"),
    (('status=~"5.."', 'code=~"5.."'), "has no label code"),
    (("by (namespace, job, le)", "by (namespace, job, bucket)"), "no such label"),
])
def test_the_checker_catches_a_misspelt_name(mutation, complaint):
    """The checks above would fail: each mutation of a real expression is reported."""
    old, new = mutation
    exprs = [r["expr"] for r in rules()] + [e for _, e in dashboard_queries()]
    (expr, *_) = [e for e in exprs if old in e]
    found = problems(substitute_grafana_variables(expr.replace(old, new, 1)))
    assert any(complaint in p for p in found), found


def test_a_syntax_error_is_not_silently_passed():
    with pytest.raises(ValueError):
        problems("sum(rate(nmt_http_requests_total[5m])")


# --------------------------------------------------------------------- alert rules vs settings


def alert(name: str) -> dict:
    (found,) = [r for r in rules() if r["alert"] == name]
    return found


def threshold(expr: str) -> float:
    tree = promql.parse(expr)
    assert isinstance(tree, promql.BinaryExpr) and isinstance(tree.rhs, promql.NumberLiteral)
    return tree.rhs.val


def test_the_expected_alerts_exist_with_a_severity_and_words():
    assert {r["alert"] for r in rules()} == ALERTS
    for rule in rules():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert promql.parse_duration(rule["for"]) >= timedelta(minutes=5)


def test_the_queue_alert_is_a_share_of_the_deployed_queue_size():
    settings = Settings(queue_size=int(base()["ConfigMap"]["data"]["NMT_QUEUE_SIZE"]))
    limit = threshold(alert("NmtQueueSaturated")["expr"])
    assert limit == settings.queue_size * 80 // 100 < settings.queue_size


def test_the_latency_alert_is_a_bucket_bound_below_the_request_timeout():
    settings = Settings(request_timeout=float(base()["ConfigMap"]["data"]["NMT_REQUEST_TIMEOUT"]))
    limit = threshold(alert("NmtHighLatency")["expr"])
    assert limit in LATENCY_BUCKETS  # histogram_quantile is exact at a bucket's bound
    assert limit < settings.request_timeout


def test_the_error_alert_is_a_share_of_answers():
    assert 0 < threshold(alert("NmtHighErrorRate")["expr"]) < 0.5


@pytest.mark.parametrize("kustomization", ["base", "overlays/cuda"])
def test_not_ready_alerts_wait_longer_than_the_startup_probe(kustomization):
    (deployment,) = [r for r in render(KUBE / kustomization) if r["kind"] == "Deployment"]
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    budget = timedelta(seconds=probe["periodSeconds"] * probe["failureThreshold"])
    for name in ("NmtPodNotReady", "NmtNoReadyReplica"):
        assert promql.parse_duration(alert(name)["for"]) > budget


def test_rules_select_the_job_of_the_scraped_service():
    service = base()["Service"]["metadata"]["name"]
    for rule in rules():
        assert f'job="{service}"' in rule["expr"], rule["alert"]


# ------------------------------------------------------------------------- ServiceMonitor


def test_the_service_monitor_scrapes_the_services_metrics_route():
    (monitor,) = [r for r in render(MONITORING) if r["kind"] == "ServiceMonitor"]
    kinds = base()
    service = kinds["Service"]
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] in {route.path for route in metrics.router.routes}
    assert promql.parse_duration(endpoint["scrapeTimeout"]) < promql.parse_duration(
        endpoint["interval"])
    annotations = kinds["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == endpoint["path"]


@pytest.mark.skipif(kustomize_command() is None, reason="neither kustomize nor kubectl installed")
def test_kustomize_builds_what_the_test_renderer_renders():
    out = subprocess.run([*kustomize_command(), str(MONITORING)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    built = [doc for doc in yaml.safe_load_all(out) if doc]
    assert sorted(built, key=lambda r: r["kind"]) == sorted(render(MONITORING),
                                                            key=lambda r: r["kind"])


@pytest.mark.slow  # importing the generated models takes seconds
def test_the_crds_pass_the_prometheus_operators_schemas():
    models_v1 = pytest.importorskip("cloudcoil.models.prometheus_operator.v1",
                                    reason="cloudcoil-models-prometheus-operator is missing")
    for resource in render(MONITORING):
        model = getattr(models_v1, resource["kind"])
        # the models drop unknown fields: what comes back must be what went in
        back = model.model_validate(resource).model_dump(mode="json", by_alias=True,
                                                          exclude_unset=True)
        assert back == resource, resource["kind"]
    (monitor,) = [r for r in render(MONITORING) if r["kind"] == "ServiceMonitor"]
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"  # a misspelt field is seen
    back = models_v1.ServiceMonitor.model_validate(monitor).model_dump(
        mode="json", by_alias=True, exclude_unset=True)
    assert back != monitor


# ------------------------------------------------------------------------------- promtool


def promtool() -> str | None:
    return shutil.which("promtool")


@pytest.mark.skipif(promtool() is None, reason="promtool is not installed (Debian: prometheus)")
def test_promtool_checks_the_rules_and_runs_their_unit_tests(tmp_path):
    (rule,) = [r for r in render(MONITORING) if r["kind"] == "PrometheusRule"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    check = subprocess.run([promtool(), "check", "rules", str(tmp_path / "rules.yaml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(ALERTS)} rules found" in check.stdout
    shutil.copy(Path(__file__).parent / "alerts_test.yaml", tmp_path)
    run = subprocess.run([promtool(), "test", "rules", "alerts_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout + run.stderr


# ------------------------------------------------------------------------------- dashboard


def test_the_dashboard_is_importable_and_shows_what_operators_ask_for():
    assert DASHBOARD["uid"] and DASHBOARD["title"] and DASHBOARD["schemaVersion"] >= 36
    panels = DASHBOARD["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        assert [t["refId"] for t in panel["targets"]] == sorted({t["refId"]
                                                                 for t in panel["targets"]})
    cells = {(x, y) for p in panels for x in range(p["gridPos"]["x"], p["gridPos"]["x"]
                                                   + p["gridPos"]["w"])
             for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])}
    assert len(cells) == sum(p["gridPos"]["w"] * p["gridPos"]["h"] for p in panels)  # no overlap
    for query in (v.get("definition") for v in variables.values() if v["type"] == "query"):
        assert problems(substitute_grafana_variables(
            re.sub(r"^label_values\((.*), *\w+\)$", r"\1", query))) == []

    queries = " ".join(expr for _, expr in dashboard_queries())
    latency = r"sum by \(le\) \(rate\(nmt_http_request_duration_seconds_bucket"
    for wanted in (rf"histogram_quantile\(0\.5, {latency}",
                   rf"histogram_quantile\(0\.95, {latency}",
                   rf"histogram_quantile\(0\.99, {latency}",
                   r"nmt_queue_depth", r"nmt_batch_size_bucket", r"nmt_tokens_total",
                   r'status=~"503\|429\|504"', r"nmt_rejected_requests_total"):
        assert re.search(wanted, queries), wanted
