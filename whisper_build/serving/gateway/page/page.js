// The try-it page: Live (microphone -> OpenAI Realtime transcription session), File (upload -> /v1/audio/transcriptions)
// and the API key (asked for when the server needs one; kept in this tab's memory only). No framework, no build step.
"use strict";

const state = { key: null, model: null, socket: null, audio: null, turns: new Map(), colours: new Map(), result: null };
const $ = (id) => document.getElementById(id);

// ----- words for failures ------------------------------------------------------------------------------------------

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

function status(message) { $("status").textContent = message; }

const HTTP_WORDS = {
  401: "The server refused the API key (401). Enter a valid key.",
  403: "The server refused the request (403).",
  404: "Not found on this server (404).",
  413: "The file is too large for this server (413). Send a shorter or compressed file.",
  429: "The server is busy (429). Try again in a few seconds.",
  503: "The server is not ready or is busy (503). Try again in a few seconds.",
  504: "The server took too long (504). Try a shorter file.",
};

async function httpError(response) {
  let detail = "";
  try {
    const body = await response.json();
    detail = (body.error && body.error.message) || body.message || "";
  } catch (_) { /* not JSON */ }
  const words = HTTP_WORDS[response.status] || `The server answered ${response.status}.`;
  return detail ? `${words} ${detail}` : words;
}

const CLOSE_WORDS = {
  1000: "The session ended.",
  1006: "The connection closed without a reason: the server refused it (a wrong API key?) or went away.",
  1008: "The server refused the session.",
  1011: "The server failed the session.",
  1012: "The server is restarting: press Start again.",
  1013: "The server has no free live session slot: try again shortly.",
};

function headers() { return state.key ? { Authorization: `Bearer ${state.key}` } : {}; }

// ----- key: checked with an HTTP call first (a refused WebSocket shows in a browser only as code 1006) --------------

async function checkKey() {
  let response;
  try {
    response = await fetch("/v1/models", { headers: headers() });
  } catch (err) {
    showError(`Cannot reach the server: ${err.message}`);
    return false;
  }
  if (response.status === 401) {
    $("key-panel").hidden = false;
    if (state.key) showError(await httpError(response));
    state.key = null;
    status("This server needs an API key.");
    return false;
  }
  if (!response.ok) {
    showError(await httpError(response));
    return false;
  }
  const models = await response.json();
  state.model = models.data && models.data.length ? models.data[0].id : "whisper-1";
  $("model").textContent = `model: ${state.model}`;
  $("key-panel").hidden = true;
  showError("");
  status(state.key ? "Key accepted." : "Ready.");
  return true;
}

// ----- tabs ---------------------------------------------------------------------------------------------------------

function selectTab(name) {
  for (const tab of ["live", "file"]) {
    $(`tab-${tab}`).setAttribute("aria-selected", String(tab === name));
    $(`view-${tab}`).hidden = tab !== name;
  }
}

function colour(speaker) {
  if (!state.colours.has(speaker)) state.colours.set(speaker, `s${state.colours.size % 6}`);
  return state.colours.get(speaker);
}

function speakerBadge(speaker) {
  const badge = document.createElement("span");
  badge.className = `speaker ${colour(speaker)}`;
  badge.textContent = speaker;
  return badge;
}

// ----- Live ---------------------------------------------------------------------------------------------------------

function turn(itemId) {
  if (!state.turns.has(itemId)) {
    const li = document.createElement("li");
    li.dataset.item = itemId;
    const text = document.createElement("span");
    text.className = "unconfirmed";
    li.append(text);
    $("transcript").append(li);
    state.turns.set(itemId, { li, text, voices: [] });
  }
  return state.turns.get(itemId);
}

// A completed turn: its final text under the speaker's label, or one labelled piece per voice when the
// turn's segment events named more than one (a quick reply inside the VAD's silence joins the turn).
function completeTurn(t, event) {
  const speaker = event.speaker || (t.voices.length ? t.voices[t.voices.length - 1].speaker : null);
  const voices = t.voices.filter((v) => v.speaker && (v.text || "").trim());
  t.li.replaceChildren();
  t.li.className = "final";
  if (new Set(voices.map((v) => v.speaker)).size > 1) {
    for (const voice of voices) {
      const piece = document.createElement("span");
      piece.className = "voice";
      piece.append(speakerBadge(voice.speaker), document.createTextNode(`${voice.text.trim()} `));
      t.li.append(piece);
    }
  } else {
    if (speaker) {
      t.li.append(speakerBadge(speaker));
      t.li.classList.add(colour(speaker));
    }
    t.li.append(document.createTextNode(event.transcript || "(no words)"));
  }
  t.done = true;
}

function onEvent(event) {
  const kind = event.type;
  if (kind === "input_audio_buffer.speech_started") {
    turn(event.item_id);
    status("Listening… speech heard.");
  } else if (kind === "conversation.item.input_audio_transcription.delta") {
    turn(event.item_id).text.textContent += event.delta || "";
  } else if (kind === "conversation.item.input_audio_transcription.segment") {
    turn(event.item_id).voices.push(event);
  } else if (kind === "conversation.item.input_audio_transcription.completed") {
    completeTurn(turn(event.item_id), event);
  } else if (kind === "conversation.item.input_audio_transcription.failed") {
    const t = turn(event.item_id);
    t.li.className = "failed";
    t.li.textContent = `This turn could not be transcribed: ${(event.error && event.error.message) || "unknown error"}`;
    t.done = true;
  } else if (kind === "error") {
    showError(`The session reported: ${event.error.message}`);
    if (state.stopping && event.error.code === "input_audio_buffer_commit_empty") closeSession();
  }
  if (state.stopping && [...state.turns.values()].every((t) => t.done)) closeSession();
}

function sessionUpdate() {
  const transcription = { model: $("live-speakers").checked ? `${state.model}-diarize` : state.model };
  const language = $("live-language").value.trim();
  if (language) transcription.language = language;
  return {
    type: "session.update",
    session: { type: "transcription", audio: { input: {
      format: { type: "audio/pcm", rate: 24000 }, transcription, turn_detection: { type: "server_vad" } } } },
  };
}

async function openMicrophone() {
  if (!window.isSecureContext || !navigator.mediaDevices) {
    throw new Error("The microphone needs a secure page: open it over HTTPS or on http://localhost.");
  }
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true } });
  const context = new AudioContext();
  if (context.state === "suspended") await context.resume();
  await context.audioWorklet.addModule("/page/pcm-worklet.js");
  const source = context.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(context, "pcm-resampler");
  source.connect(node);
  return { stream, context, node };
}

function micWords(err) {
  if (err.name === "NotAllowedError") return "Microphone permission was denied: allow it in the browser and press Start.";
  if (err.name === "NotFoundError") return "No microphone was found.";
  if (err.name === "NotReadableError") return "The microphone is in use by another program.";
  return err.message;
}

function base64(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

async function startLive() {
  showError("");
  if (!(await checkKey())) return;
  try {
    state.audio = await openMicrophone();
  } catch (err) {
    showError(micWords(err));
    return;
  }
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const protocols = state.key ? ["realtime", `openai-insecure-api-key.${state.key}`] : ["realtime"];
  const socket = new WebSocket(`${scheme}://${location.host}/v1/realtime?intent=transcription`, protocols);
  state.socket = socket;
  state.stopping = false;
  socket.onopen = () => {
    socket.send(JSON.stringify(sessionUpdate()));
    state.audio.node.port.onmessage = (message) => {
      if (socket.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify({ type: "input_audio_buffer.append", audio: base64(message.data) }));
      }
    };
    status("Listening… speak now.");
  };
  socket.onmessage = (message) => onEvent(JSON.parse(message.data));
  socket.onclose = (event) => {
    if (state.socket === socket) stopMicrophone();
    if (event.code !== 1000 && event.code !== 1005) {
      showError(event.reason || CLOSE_WORDS[event.code] || `The session closed (code ${event.code}).`);
    }
    status("Stopped.");
    setLiveButtons(false);
  };
  setLiveButtons(true);
}

function stopMicrophone() {
  if (!state.audio) return;
  state.audio.stream.getTracks().forEach((track) => track.stop());
  state.audio.context.close();
  state.audio = null;
}

function stopLive() {
  const socket = state.socket;
  if (state.audio) state.audio.node.port.postMessage("flush");
  stopMicrophone();
  if (!socket || socket.readyState !== WebSocket.OPEN) return;
  state.stopping = true;
  const open = [...state.turns.values()].some((t) => !t.done);
  if (!open) { closeSession(); return; }
  socket.send(JSON.stringify({ type: "input_audio_buffer.commit" })); // the turn in progress ends now
  status("Finishing the last turn…");
  setTimeout(closeSession, 300000); // a busy server may take long; its own deadlines bound each decode
}

function closeSession() {
  if (state.socket && state.socket.readyState === WebSocket.OPEN) state.socket.close(1000);
}

function setLiveButtons(running) {
  $("live-start").disabled = running;
  $("live-stop").disabled = !running;
}

// ----- File ---------------------------------------------------------------------------------------------------------

function clock(seconds) {
  const m = Math.floor(seconds / 60);
  return `${m}:${(seconds - m * 60).toFixed(1).padStart(4, "0")}`;
}

function renderSegments(segments, duration) {
  const result = $("result");
  const timeline = $("timeline");
  timeline.replaceChildren();
  const total = duration || Math.max(1, ...segments.map((s) => s.end));
  for (const segment of segments) {
    const row = document.createElement("div");
    row.className = "seg";
    const time = document.createElement("span");
    time.className = "time";
    time.textContent = `${clock(segment.start)}–${clock(segment.end)}`;
    row.append(time);
    if (segment.speaker) {
      row.classList.add(colour(segment.speaker));
      row.append(speakerBadge(segment.speaker));
      const block = document.createElement("div");
      block.className = colour(segment.speaker);
      block.title = `${segment.speaker} ${clock(segment.start)}–${clock(segment.end)}`;
      block.style.left = `${(100 * segment.start) / total}%`;
      block.style.width = `${Math.max(0.3, (100 * (segment.end - segment.start)) / total)}%`;
      timeline.append(block);
    }
    row.append(document.createTextNode(segment.text.trim()));
    result.append(row);
  }
}

function renderResult(format, text) {
  const result = $("result");
  result.replaceChildren();
  if (format === "verbose_json" || format === "diarized_json") {
    const body = JSON.parse(text);
    renderSegments(body.segments || [], body.duration);
    result.dataset.speakers = String(new Set((body.segments || []).map((s) => s.speaker).filter(Boolean)).size);
  } else {
    const pre = document.createElement("pre");
    pre.textContent = text;
    result.append(pre);
  }
  result.dataset.done = "true";
}

async function readStream(response, format) {
  // text/event-stream: transcript.text.delta, transcript.text.segment (speakers), transcript.text.done
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const pre = document.createElement("pre");
  $("result").replaceChildren(pre);
  const segments = [];
  let buffer = "";
  let done = null;
  for (;;) {
    const { value, done: finished } = await reader.read();
    if (finished) break;
    buffer += value.replace(/\r\n?/g, "\n"); // SSE lines end in CRLF, LF or CR (sse-starlette: CRLF)
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const data = buffer.slice(0, end).split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("");
      buffer = buffer.slice(end + 2);
      if (!data.trim()) continue;
      const event = JSON.parse(data);
      if (event.error) throw new Error(`The stream failed: ${event.error.message}`);
      if (event.type === "transcript.text.delta") pre.textContent += event.delta;
      if (event.type === "transcript.text.segment") segments.push(event);
      if (event.type === "transcript.text.done") done = event;
    }
  }
  const body = { text: done ? done.text : pre.textContent, segments };
  if (segments.length) renderResult("diarized_json", JSON.stringify(body));
  else $("result").dataset.done = "true";
  return JSON.stringify(done || body, null, 2);
}

async function sendFile(event) {
  event.preventDefault();
  showError("");
  const file = $("file").files[0];
  if (!file) { showError("Choose an audio file first."); return; }
  if (!(await checkKey())) return;
  const format = $("format").value;
  const form = new FormData();
  form.append("file", file);
  form.append("model", state.model);
  form.append("response_format", format);
  if ($("stream").checked) form.append("stream", "true");
  $("result").replaceChildren();
  $("timeline").replaceChildren();
  delete $("result").dataset.done;
  $("file-send").disabled = true;
  status(`Transcribing ${file.name}…`);
  try {
    const response = await fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: headers() });
    if (!response.ok) { showError(await httpError(response)); status(""); return; }
    let text;
    if ((response.headers.get("content-type") || "").startsWith("text/event-stream")) {
      text = await readStream(response, format);
    } else {
      text = await response.text();
      renderResult(format, text);
    }
    const extension = { text: "txt", srt: "srt", vtt: "vtt" }[format] || "json";
    state.result = { text, name: `${file.name.replace(/\.[^.]*$/, "")}.${extension}` };
    $("file-download").disabled = false;
    status("Done.");
  } catch (err) {
    showError(err.message.startsWith("The ") ? err.message : `The request failed: ${err.message}`);
    status("");
  } finally {
    $("file-send").disabled = false;
  }
}

function download() {
  if (!state.result) return;
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([state.result.text], { type: "text/plain" }));
  link.download = state.result.name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

// ----- wiring -------------------------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("tab-live").addEventListener("click", () => selectTab("live"));
  $("tab-file").addEventListener("click", () => selectTab("file"));
  $("live-start").addEventListener("click", startLive);
  $("live-stop").addEventListener("click", stopLive);
  $("file-form").addEventListener("submit", sendFile);
  $("file-download").addEventListener("click", download);
  $("key-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    state.key = $("key").value.trim() || null;
    $("key").value = "";
    await checkKey();
  });
  $("secure-note").hidden = window.isSecureContext;
  checkKey();
});
