// The page's logic, plain JavaScript with no build step and nothing fetched from elsewhere.
// Languages, limits and defaults come from the server's LibreTranslate endpoints (/languages,
// /frontend/settings); text goes through /v1/translate (beam, alternatives, the detected source);
// documents go through /v1/documents jobs, uploaded with XMLHttpRequest because fetch reports no
// upload progress.
"use strict";

const $ = (id) => document.getElementById(id);

const page = {
  languages: new Map(), // code -> {name, targets}
  charLimit: null,
  requestTimeoutMs: null, // how long a request may hang before the page gives up on it
  // how long a running document job may show no progress before the page gives up on it: the
  // server gives jobs no deadline of their own (docs/documents.md), so the page bounds a
  // silence, not the whole run; a queued job waits its turn (Cancel is there)
  jobStallMs: 10 * 60_000,
  detected: null,       // the language the server found for source "auto", until it changes
  alternatives: [],
  shownFor: null,       // textAndPair() of the text the translation shown is the translation of
  busy: false,
  ready: false,
  files: false,         // whether the server translates documents (/frontend/settings)
  chosenFile: null,
  run: null,            // the document being translated: {xhr, controller, jobUrl, cancelled,
                        // stalled}
};

// --- small helpers -----------------------------------------------------------------------------

function setStatus(text, isError = false, id = "status") {
  $(id).textContent = text;
  $(id).classList.toggle("error", isError);
}

const docStatus = (text, isError = false) => setStatus(text, isError, "doc-status");

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });
}

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { "Authorization": "Bearer " + key } : {};
}

function languageName(code) {
  return page.languages.get(code)?.name ?? code;
}

// "1 sentence", "2 sentences"
const sentences = (n) => `${n} sentence${n === 1 ? "" : "s"}`;

// The server counts characters as code points; a JS string's length counts UTF-16 units.
const charCount = (text) => [...text].length;

function parseJSON(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

// An error answer in words: the server's JSON message ({"error": ...}) when there is one.
function errorWords(status, statusText, body, retryAfter) {
  let words = `Error ${status}: ${body?.error ?? (statusText || "the server refused the request")}`;
  if (retryAfter) words += ` (try again in ${retryAfter} s)`;
  if (status === 401 && !$("api-key").value.trim()) words += ". Enter an API key above.";
  return words;
}

// The control that holds a field the server names in an error ({"field": "options.beam_size"}).
const FIELD_CONTROLS = {
  "text": "source-text", "source": "source", "target": "target",
  "options.beam_size": "beam", "options.alternatives": "alternative-count",
};

// Marked invalid (and described by the message) until the person changes it.
function markInvalid(field, messageId) {
  const control = $(FIELD_CONTROLS[field] ?? "");
  if (!control || control.getAttribute("aria-invalid") === "true") return;
  const described = control.getAttribute("aria-describedby");
  control.setAttribute("aria-invalid", "true");
  control.setAttribute("aria-describedby", messageId);
  control.addEventListener("change", () => {
    control.removeAttribute("aria-invalid");
    if (described) control.setAttribute("aria-describedby", described);
    else control.removeAttribute("aria-describedby");
  }, { once: true });
}

async function responseError(response, messageId) {
  const body = parseJSON(await response.text().catch(() => ""));
  if (messageId && body?.field) markInvalid(body.field, messageId);
  return errorWords(response.status, response.statusText, body,
                    response.headers.get("Retry-After"));
}

function networkWords(err) {
  return `The server could not be reached (${err.message ?? err}). ` +
         "Check that it is running and try again.";
}

// 0.5 s, 40 s, 10 min
const duration = (ms) => ms < 120_000 ? `${ms / 1000} s` : `${Math.round(ms / 60_000)} min`;

// A request's signal that gives up past the server's own timeout and a margin (a stopped
// process, a stuck proxy), and with `signal` (Cancel).
function bounded(signal) {
  const waitMs = page.requestTimeoutMs;
  if (!waitMs) return signal;
  const timeout = AbortSignal.timeout(waitMs);
  if (!signal) return timeout;
  return AbortSignal.any?.([signal, timeout]) ?? signal; // a browser before 2024: Cancel only
}

// What a failed request, not refused by the server, comes to in words.
function failureWords(err) {
  if (err?.name === "TimeoutError") {
    return `Error: no answer from the server within ${duration(page.requestTimeoutMs)}; ` +
           "it may be overloaded or stopped. Try again.";
  }
  return err instanceof TypeError ? networkWords(err) : err.message;
}

// --- languages and settings --------------------------------------------------------------------

function option(value, text) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = text;
  return o;
}

// Targets worth offering: a language is its own target too on the server (the text comes back
// unchanged), which the menu leaves out.
function targetsOf(source) {
  if (source === "auto") {
    const all = new Set();
    for (const [code, lang] of page.languages) {
      for (const t of lang.targets) if (t !== code) all.add(t);
    }
    return [...all].sort();
  }
  return (page.languages.get(source)?.targets ?? []).filter((t) => t !== source);
}

function fillTargets(preferred) {
  const select = $("target");
  const keep = preferred ?? select.value;
  const targets = targetsOf($("source").value);
  select.replaceChildren(...targets.map((t) => option(t, languageName(t))));
  if (targets.includes(keep)) select.value = keep;
}

function effectiveSource() {
  const source = $("source").value;
  return source === "auto" ? page.detected : source;
}

function canSwap() {
  const source = effectiveSource();
  const target = $("target").value;
  return Boolean(source && target && targetsOf(target).includes(source));
}

function updateSwap() {
  const source = effectiveSource();
  const target = $("target").value;
  const swap = $("swap");
  // off while a translation runs: its answer would land on the swapped texts
  swap.disabled = !page.ready || page.busy || !canSwap();
  if (page.busy) {
    swap.title = "Wait for the translation to finish, then swap";
  } else if (!source) {
    swap.title = "Translate once so the source language is known, then swap";
  } else if (swap.disabled) {
    swap.title = `${languageName(target)} → ${languageName(source)} is not served here`;
  } else {
    swap.title = `Swap to ${languageName(target)} → ${languageName(source)}`;
  }
}

function applySettings(settings, languages) {
  page.languages = new Map(languages.map((l) => [l.code, { name: l.name, targets: l.targets }]));
  page.charLimit = settings.charLimit > 0 ? settings.charLimit : null;
  // the server's timeout and a margin, so that its own 504 (in its words) normally comes first
  page.requestTimeoutMs = settings.requestTimeout > 0 ? settings.requestTimeout + 10_000 : null;
  const sources = languages.filter((l) => l.targets.some((t) => t !== l.code));
  $("source").replaceChildren(option("auto", "Detect language"),
                              ...sources.map((l) => option(l.code, l.name)));
  const defaults = settings.language ?? {};
  if ([...$("source").options].some((o) => o.value === defaults.source?.code)) {
    $("source").value = defaults.source.code;
  }
  fillTargets(defaults.target?.code);
  if (settings.keyRequired) {
    $("api-key").required = true;
    $("api-key").placeholder = "required";
    $("api-key-label").textContent = "API key (required)";
  }
  if (settings.filesTranslation) {
    if (settings.supportedFilesFormat?.length) {
      $("doc-file").accept = settings.supportedFilesFormat.join(",");
    }
  } else {
    $("doc-file").disabled = true;
    $("drop-zone").classList.add("off");
    docStatus("Document translation is turned off on this server.");
  }
  page.files = Boolean(settings.filesTranslation);
}

async function load() {
  for (let attempt = 0; attempt < 120; attempt++) {
    try {
      const [settings, languages] = await Promise.all(
        ["/frontend/settings", "/languages"].map((url) => fetch(url)));
      if (settings.ok && languages.ok) {
        applySettings(await settings.json(), await languages.json());
        page.ready = true;
        for (const id of ["source", "target", "translate"]) $(id).disabled = false;
        updateCounter();
        updateSwap();
        chooseFile(page.chosenFile);
        setStatus(page.languages.size ? "Ready." : "No models loaded.", !page.languages.size);
        return;
      }
      const failed = settings.ok ? languages : settings;
      if (failed.status !== 503) return setStatus(await responseError(failed), true);
      setStatus("Waiting for the models to load…");
    } catch (err) {
      setStatus(networkWords(err), true);
    }
    await sleep(1000);
  }
  setStatus("The service did not become ready; reload the page to try again.", true);
}

// --- text --------------------------------------------------------------------------------------

function updateCounter() {
  const n = charCount($("source-text").value);
  const limit = page.charLimit;
  const over = limit !== null && n > limit;
  const counter = $("counter");
  counter.textContent = limit === null ? `${n}` : `${n} / ${limit}`;
  counter.classList.toggle("over", over);
  // announced once when the text goes over, not at every key as the count itself would be
  const note = over ? `over the server's limit of ${limit} characters` : "";
  if ($("limit-note").textContent !== note) $("limit-note").textContent = note;
  $("source-text").setAttribute("aria-invalid", String(over));
  // not turned off while a translation runs (translate() waits for it): a focused button that
  // turns off loses the keyboard's place
  $("translate").disabled = !page.ready || over;
}

function setOutput(text) {
  $("output").textContent = text;
  $("copy").disabled = !text;
  $("copied").textContent = "";
}

function showAlternatives(list) {
  page.alternatives = list;
  const buttons = list.map((text, i) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "alternative";
    button.textContent = text;
    button.addEventListener("click", () => useAlternative(i));
    const item = document.createElement("li");
    item.append(button);
    return item;
  });
  $("alternatives").replaceChildren(...buttons);
  $("alternatives-box").hidden = list.length === 0;
}

// The chosen alternative becomes the translation and the translation takes its place in the list.
function useAlternative(i) {
  const chosen = page.alternatives[i];
  const list = [...page.alternatives];
  list[i] = $("output").textContent;
  setOutput(chosen);
  showAlternatives(list);
  $("alternatives").querySelectorAll("button")[i]?.focus();
  setStatus(`Using alternative ${i + 1}.`);
}

// The text and the pair of languages a translation is asked for.
const textAndPair = () => JSON.stringify([$("source-text").value, $("source").value,
                                          $("target").value]);

// An error for another text (or pair) than the translation shown takes that translation away,
// and the language detected in its text: below the error they would pass for the new text's.
// One for the same text leaves them standing.
function translationFailed(words, asked) {
  setStatus(words, true);
  if (asked === page.shownFor) return;
  setOutput("");
  showAlternatives([]);
  showDetected(null);
}

function showDetected(code) {
  page.detected = code;
  $("detected").textContent = code ? `Detected: ${languageName(code)}` : "";
  updateSwap();
}

async function translate(event) {
  event?.preventDefault();
  if (page.busy || !page.ready) return;
  const text = $("source-text").value;
  const asked = textAndPair();
  if (!text.trim()) {
    translationFailed("Type some text to translate first.", asked);
    $("source-text").focus();
    return;
  }
  // Ctrl+Enter submits the form itself, past the Translate button that is off over the limit
  const count = charCount(text);
  if (page.charLimit !== null && count > page.charLimit) {
    translationFailed(`The text has ${count} characters, over the server's limit of ` +
                      `${page.charLimit}: shorten it to translate.`, asked);
    $("source-text").focus();
    return;
  }
  const source = $("source").value;
  const target = $("target").value;
  const options = {};
  if ($("beam").value) options.beam_size = Number($("beam").value);
  const wanted = Number($("alternative-count").value);
  if (wanted) options.alternatives = wanted;
  page.busy = true;
  updateCounter();
  updateSwap();
  setStatus("Translating…");
  const started = performance.now();
  try {
    const response = await fetch("/v1/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify({ text, source, target, options }),
      signal: bounded(),
    });
    if (!response.ok) return translationFailed(await responseError(response, "status"), asked);
    const body = await response.json();
    const ms = (performance.now() - started).toFixed(0);
    const result = body.translations[0];
    setOutput(result.text);
    page.shownFor = asked;
    showAlternatives(result.alternatives ?? []);
    showDetected(source === "auto" ? body.source : null);
    if (body.model === "identity") {
      // detection found the target language: the server sent the text back untouched
      return setStatus(`Already in ${languageName(body.target)}: the text is shown as it is.`);
    }
    const via = body.pivot ? ` through ${languageName(body.pivot)}` : "";
    setStatus(`Translated ${sentences(body.sentences)} from ${languageName(body.source)} to ` +
              `${languageName(body.target)}${via} with ${body.model} in ${ms} ms ` +
              `(server ${body.elapsed_ms.toFixed(0)} ms).`);
  } catch (err) {
    // a hung request would otherwise keep the page busy, and Translate doing nothing, for ever
    translationFailed(failureWords(err), asked);
  } finally {
    page.busy = false;
    updateCounter();
    updateSwap();
  }
}

// Languages change places, and so do the texts when there is a translation to read back.
function swap() {
  if (page.busy || !canSwap()) return;
  const source = effectiveSource();
  const target = $("target").value;
  $("source").value = target;
  fillTargets(source);
  const translation = $("output").textContent;
  if (translation) {
    const original = $("source-text").value;
    $("source-text").value = translation;
    setOutput(original);
    page.shownFor = textAndPair();
  }
  showAlternatives([]);
  showDetected(null);
  updateCounter();
  setStatus(`Now ${languageName(target)} → ${languageName(source)}.`);
}

function clearText() {
  $("source-text").value = "";
  setOutput("");
  showAlternatives([]);
  if ($("source").value === "auto") showDetected(null);
  updateCounter();
  $("source-text").focus();
}

// A page served over plain http from another host is no secure context: no navigator.clipboard
// there, so the older copy command on a hidden text area does the work.
function copyWithCommand(text) {
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "offscreen";
  document.body.append(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  if (!copied) throw new Error("the browser refused to copy");
}

async function copyTranslation() {
  const text = $("output").textContent;
  if (!text) return;
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
    } else {
      copyWithCommand(text);
    }
    $("copied").textContent = "Copied.";
  } catch (err) {
    $("copied").textContent = `Could not copy (${err.message ?? err}); select the text instead.`;
  }
  $("copy").focus();
}

// --- documents ---------------------------------------------------------------------------------

function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function chooseFile(file) {
  page.chosenFile = file ?? null;
  $("doc-chosen").textContent = file ? `Chosen: ${file.name} (${formatSize(file.size)})`
                                     : "No document chosen.";
  $("doc-upload").disabled = !file || !page.ready || !page.files || page.run !== null;
  if (file) $("doc-download").hidden = true;
}

function showProgress(phase, value, max = 1) {
  $("doc-phase").textContent = phase;
  $("doc-progress").max = Math.max(max, 1);
  $("doc-progress").value = value;
}

function setRunning(running) {
  const focused = document.activeElement;
  $("doc-upload").disabled = running || !page.chosenFile;
  $("doc-cancel").hidden = !running;
  $("doc-file").disabled = running || !page.files;
  $("drop-zone").classList.toggle("busy", running);
  if (running) {
    $("doc-progress-label").hidden = false;
    $("doc-download").hidden = true;
  }
  // the keyboard's place moves on with the control it was on, which turns off or disappears:
  // to Cancel while the document runs, then to the download (or back to the button)
  if (running && focused === $("doc-upload")) $("doc-cancel").focus();
  if (!running && (focused === $("doc-cancel") || focused === document.body)) {
    ($("doc-download").hidden ? $("doc-upload") : $("doc-download")).focus();
  }
}

// POST the form with upload progress; resolves with the finished request whatever its status.
function upload(run, form) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    run.xhr = xhr;
    xhr.open("POST", "/v1/documents");
    for (const [name, value] of Object.entries(authHeaders())) xhr.setRequestHeader(name, value);
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) {
        showProgress(`Uploading ${Math.floor(100 * e.loaded / e.total)}%`, e.loaded / e.total);
      }
    });
    xhr.addEventListener("load", () => resolve(xhr));
    xhr.addEventListener("error", () => reject(new Error(networkWords("the upload broke off"))));
    xhr.addEventListener("abort", () => reject(new Error("cancelled")));
    xhr.send(form);
  });
}

async function getJob(run) {
  const response = await fetch(run.jobUrl, { headers: authHeaders(),
                                             signal: bounded(run.controller.signal) });
  if (!response.ok) throw new Error(await responseError(response));
  return response.json();
}

function showJob(job) {
  const { done, total, pages_read: read = 0, pages = 0 } = job.progress;
  if (job.state === "running" && !total && pages) {
    // a long PDF takes a while to read before its sentences are known
    return showProgress(`Reading page ${read} / ${pages}`, read, pages);
  }
  const phase = job.state === "queued" ? "Waiting in the queue"
    : `Translating${total ? ` ${done} / ${sentences(total)}` : ""}`;
  showProgress(phase, done, total);
}

// film.srt translated to German downloads as film.de.srt, beside the original.
function translatedName(filename, target) {
  const dot = filename.lastIndexOf(".");
  return dot > 0 ? `${filename.slice(0, dot)}.${target}${filename.slice(dot)}`
                 : `${filename}.${target}`;
}

async function translateDocument(event) {
  event.preventDefault();
  const file = page.chosenFile;
  if (!file) return docStatus("Choose or drop a document first.", true);
  if (page.run) return;
  const run = page.run = { xhr: null, controller: new AbortController(), jobUrl: null,
                           cancelled: false, stalled: false };
  const form = new FormData();
  form.append("file", file);
  form.append("source", $("source").value);
  form.append("target", $("target").value);
  setRunning(true);
  showProgress("Uploading 0%", 0);
  docStatus(`Uploading ${file.name}…`);
  try {
    const xhr = await upload(run, form);
    const body = parseJSON(xhr.responseText);
    if (xhr.status !== 202) {
      throw new Error(errorWords(xhr.status, xhr.statusText, body,
                                 xhr.getResponseHeader("Retry-After")));
    }
    run.jobUrl = xhr.getResponseHeader("Location");
    docStatus(`${file.name}: uploaded; translating…`);
    let job = body;
    let seen = null;
    let changed = performance.now();
    while (job.state === "queued" || job.state === "running") {
      showJob(job);
      const now = JSON.stringify([job.state, job.progress]);
      if (now !== seen || job.state === "queued") [seen, changed] = [now, performance.now()];
      if (performance.now() - changed > page.jobStallMs) {
        run.stalled = true;
        throw new Error("stalled");
      }
      await sleep(400, run.controller.signal);
      job = await getJob(run);
    }
    showJob(job);
    if (job.state !== "done") {
      throw new Error(`${job.filename}: ${job.state}${job.error ? ": " + job.error : ""}`);
    }
    showProgress("Downloading", 0);
    const result = await fetch(job.result, { headers: authHeaders(),
                                             signal: run.controller.signal });
    if (!result.ok) throw new Error(await responseError(result));
    const link = $("doc-download");
    if (link.href) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(await result.blob());
    link.download = translatedName(job.filename, job.target);
    link.textContent = `Download ${link.download}`;
    link.hidden = false;
    showProgress("Done", 1);
    docStatus(`${job.filename}: done, ${sentences(job.progress.total)} translated.`);
  } catch (err) {
    if (run.cancelled || run.stalled) {
      await reportCancel(run);
    } else {
      $("doc-progress-label").hidden = true;
      docStatus(failureWords(err), true);
    }
  } finally {
    page.run = null;
    setRunning(false);
  }
}

function cancelDocument() {
  const run = page.run;
  if (!run || run.cancelled) return;
  run.cancelled = true;
  docStatus("Cancelling…");
  if (run.xhr && run.xhr.readyState !== XMLHttpRequest.DONE) run.xhr.abort();
  run.controller.abort(new Error("cancelled"));
}

// Once the upload has become a job the server works on it by itself: cancelling deletes it. A job
// that stopped moving is cancelled so too (nobody would collect its result), said why.
async function reportCancel(run) {
  $("doc-progress-label").hidden = true;
  const why = run.stalled ? `No progress for ${duration(page.jobStallMs)} (the server may be ` +
                            "stuck), so the page stopped waiting. "
                          : "";
  const say = (words, isError = false) => docStatus(why + words, isError || run.stalled);
  if (!run.jobUrl) return say("Upload cancelled.");
  try {
    const response = await fetch(run.jobUrl, { method: "DELETE", headers: authHeaders(),
                                               signal: bounded() });
    if (!response.ok) return say(await responseError(response), true);
    // 204: the job had finished before the cancel arrived, and was removed with its result
    say(response.status === 204 ? "Cancelled: the job had already finished; it was removed."
                                 : "Cancelled: the server stopped the job.");
  } catch (err) {
    say(failureWords(err), true);
  }
}

function setUpDropZone() {
  const zone = $("drop-zone");
  const accepts = (e) => page.files && !page.run && e.dataTransfer?.types.includes("Files");
  for (const type of ["dragenter", "dragover"]) {
    zone.addEventListener(type, (e) => {
      if (!accepts(e)) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = "copy";
      zone.classList.add("dragging");
    });
  }
  zone.addEventListener("dragleave", (e) => {
    if (!zone.contains(e.relatedTarget)) zone.classList.remove("dragging");
  });
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("dragging");
    if (!accepts(e)) return;
    const files = e.dataTransfer.files;
    if (!files.length) return;
    try {
      $("doc-file").files = files; // keep the input showing the same file
    } catch {
      // an old browser's read-only FileList: the page's own record is enough
    }
    chooseFile(files[0]);
    if (files.length > 1) docStatus(`One document at a time: ${files[0].name} is chosen.`);
  });
  // a file dropped beside the zone must not make the browser leave the page to open it
  for (const type of ["dragover", "drop"]) {
    window.addEventListener(type, (e) => {
      if (!zone.contains(e.target)) e.preventDefault();
    });
  }
}

// --- wiring ------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("form").addEventListener("submit", translate);
  $("source-text").addEventListener("input", updateCounter);
  $("source-text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      $("form").requestSubmit();
    }
  });
  $("source").addEventListener("change", () => {
    fillTargets();
    showDetected(null);
  });
  $("target").addEventListener("change", updateSwap);
  $("swap").addEventListener("click", swap);
  $("clear").addEventListener("click", clearText);
  $("copy").addEventListener("click", copyTranslation);
  $("doc-form").addEventListener("submit", translateDocument);
  $("doc-file").addEventListener("change", () => chooseFile($("doc-file").files[0]));
  $("doc-cancel").addEventListener("click", cancelDocument);
  setUpDropZone();
  load();
});
