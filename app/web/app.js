// The page's logic: list the pairs, translate, show the time taken; upload a document as a
// /v1/documents job, poll its progress, offer the result for download. No build step.
"use strict";

const $ = (id) => document.getElementById(id);

function setStatus(text, isError = false, id = "status") {
  $(id).textContent = text;
  $(id).classList.toggle("error", isError);
}

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { "Authorization": "Bearer " + key } : {};
}

function headers() {
  return { "Content-Type": "application/json", ...authHeaders() };
}

async function loadModels() {
  for (let attempt = 0; attempt < 60; attempt++) {
    const response = await fetch("/v1/models");
    if (response.ok) {
      const { models } = await response.json();
      const select = $("pair");
      select.innerHTML = "";
      for (const m of models) {
        const option = document.createElement("option");
        option.value = JSON.stringify([m.source, m.target]);
        option.textContent = `${m.source} → ${m.target} (${m.name}, ${m.variant ?? "default"})`;
        select.append(option);
      }
      select.disabled = false;
      $("translate").disabled = models.length === 0;
      $("doc-upload").disabled = models.length === 0;
      setStatus(models.length ? "Ready." : "No models loaded.", !models.length);
      return;
    }
    setStatus("Waiting for the models to load…");
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  setStatus("The service is not ready.", true);
}

async function translate(event) {
  event.preventDefault();
  const text = $("source-text").value;
  if (!text.trim()) return;
  const [source, target] = JSON.parse($("pair").value);
  const options = {};
  if ($("beam").value) options.beam_size = Number($("beam").value);
  $("translate").disabled = true;
  setStatus("Translating…");
  const started = performance.now();
  try {
    const response = await fetch("/v1/translate", {
      method: "POST", headers: headers(), body: JSON.stringify({ text, source, target, options }),
    });
    const body = await response.json();
    const ms = (performance.now() - started).toFixed(0);
    if (!response.ok) {
      setStatus(`Error ${response.status}: ${body.error ?? response.statusText}`, true);
      return;
    }
    $("output").textContent = body.translations[0].text;
    setStatus(`Translated ${body.sentences} sentence(s) with ${body.model} in ${ms} ms ` +
              `(server ${body.elapsed_ms.toFixed(0)} ms).`);
  } catch (err) {
    setStatus(`Request failed: ${err}`, true);
  } finally {
    $("translate").disabled = false;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function errorText(response) {
  try {
    return (await response.json()).error ?? response.statusText;
  } catch {
    return response.statusText;
  }
}

function showProgress(job) {
  const { done, total } = job.progress;
  $("doc-progress").max = Math.max(total, 1);
  $("doc-progress").value = done;
  const count = total ? ` ${done} / ${total} sentences` : "";
  setStatus(`${job.filename}: ${job.state}${count}`, false, "doc-status");
}

async function translateDocument(event) {
  event.preventDefault();
  const file = $("doc-file").files[0];
  if (!file) return setStatus("Choose a document first.", true, "doc-status");
  const [source, target] = JSON.parse($("pair").value);
  const form = new FormData();
  form.append("file", file);
  form.append("source", source);
  form.append("target", target);
  $("doc-upload").disabled = true;
  $("doc-download").hidden = true;
  $("doc-progress").hidden = false;
  try {
    const response = await fetch("/v1/documents", {
      method: "POST", headers: authHeaders(), body: form,
    });
    if (response.status !== 202) {
      return setStatus(`Error ${response.status}: ${await errorText(response)}`, true,
                       "doc-status");
    }
    let job = await response.json();
    const url = response.headers.get("Location");
    while (job.state === "queued" || job.state === "running") {
      showProgress(job);
      await sleep(500);
      const poll = await fetch(url, { headers: authHeaders() });
      if (!poll.ok) {
        return setStatus(`Error ${poll.status}: ${await errorText(poll)}`, true, "doc-status");
      }
      job = await poll.json();
    }
    showProgress(job);
    if (job.state !== "done") {
      return setStatus(`${job.filename}: ${job.state}${job.error ? ": " + job.error : ""}`,
                       true, "doc-status");
    }
    const result = await fetch(job.result, { headers: authHeaders() });
    if (!result.ok) {
      return setStatus(`Error ${result.status}: ${await errorText(result)}`, true,
                       "doc-status");
    }
    const link = $("doc-download");
    URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(await result.blob());
    link.download = job.filename;
    link.textContent = `Download ${job.filename}`;
    link.hidden = false;
    setStatus(`${job.filename}: done, ${job.progress.total} sentences.`, false, "doc-status");
  } catch (err) {
    setStatus(`Request failed: ${err}`, true, "doc-status");
  } finally {
    $("doc-upload").disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("form").addEventListener("submit", translate);
  $("doc-form").addEventListener("submit", translateDocument);
  $("source-text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("form").requestSubmit();
  });
  loadModels();
});
