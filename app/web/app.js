// The page's logic: list the pairs, translate, show the time taken. No build step.
"use strict";

const $ = (id) => document.getElementById(id);

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
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

document.addEventListener("DOMContentLoaded", () => {
  $("form").addEventListener("submit", translate);
  $("source-text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("form").requestSubmit();
  });
  loadModels();
});
