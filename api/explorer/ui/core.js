/* epimem explorer: the public /v1 API, plain-words errors, DOM and formatting helpers.
   No framework, no build step. The API key (when the server has keys) lives only in sessionStorage. */
"use strict";

const KEY_STORE = "epimem.apiKey";

class ApiError extends Error {
  constructor(status, code, message, details, method) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
    this.method = method;
  }
}

const api = {
  get key() { return sessionStorage.getItem(KEY_STORE); },
  set key(value) {
    if (value) sessionStorage.setItem(KEY_STORE, value); else sessionStorage.removeItem(KEY_STORE);
  },

  url(path, query) {
    const url = new URL("/v1" + path, location.origin);
    for (const [name, value] of Object.entries(query || {})) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
    }
    return url;
  },

  /* Every call: Bearer key when one is set; JSON content type on every write (the server refuses
     other content types on state-changing routes). */
  async request(method, path, { query, body, raw } = {}) {
    const headers = { Accept: "application/json" };
    if (this.key) headers.Authorization = "Bearer " + this.key;
    const init = { method, headers };
    if (method !== "GET") {
      headers["Content-Type"] = "application/json";
      if (body !== undefined) init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(this.url(path, query), init);
    } catch (error) {
      throw new ApiError(0, "network", "cannot reach the epimem server", {}, method);
    }
    if (!response.ok) {
      let payload = {};
      try { payload = (await response.json()).error || {}; } catch (error) { payload = {}; }
      throw new ApiError(response.status, payload.code || "error", payload.message || response.statusText,
        payload.details, method);
    }
    return raw ? response : response.json();
  },
  get(path, query) { return this.request("GET", path, { query }); },
  del(path) { return this.request("DELETE", path); },
};

const g = (group) => "/groups/" + encodeURIComponent(group);
const gs = (group, session) => g(group) + "/sessions/" + encodeURIComponent(session);

/* A server error in plain words, never raw JSON. */
function explain(error, role) {
  if (!(error instanceof ApiError)) return "Something went wrong in the explorer: " + error.message;
  const said = error.message ? ` (the server said: “${error.message}”)` : "";
  switch (error.status) {
    case 0:
      return "Cannot reach the epimem server. Check that it is still running, then reload this page.";
    case 401:
      return "This server needs an API key, and the key given was missing or not accepted.";
    case 403:
      if (error.method && error.method !== "GET" && role === "read") {
        return "Refused: your key is read-only. It can look at memories but not change or delete them; "
          + "deleting and exporting need an admin key" + said + ".";
      }
      return "Refused: your key does not allow this" + said + ". Ask whoever runs this server for a key "
        + "that covers this group with the right role.";
    case 404:
      return "Not found: it may have been deleted, or the address is wrong" + said + ".";
    case 409:
      return "This conflicts with what is already stored" + said + ".";
    case 413:
    case 422:
      return "The server could not accept this input" + said + ".";
    case 503:
      return "The memory store is unavailable right now, so nothing was read or changed" + said
        + ". Try again in a moment.";
    default:
      return `The server answered with an error (${error.status})${said}.`;
  }
}

/* h("a", {href: "#"}, "text", child) — builds DOM nodes; text is always text, never HTML. */
function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else if (name === "style") node.style.cssText = value; // CSSOM: allowed by the policy's style-src 'self'
    else if (value === true) node.setAttribute(name, "");
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmtTime(value) {
  if (!value) return "—";
  const date = value instanceof Date ? value : new Date(value);
  return date.toISOString().slice(0, 16).replace("T", " ") + " UTC";
}

function fmtSpan(ms) {
  const units = [["year", 365.25 * 864e5], ["month", 30.44 * 864e5], ["day", 864e5], ["hour", 36e5], ["minute", 6e4]];
  for (const [name, size] of units) {
    if (ms >= size) {
      const n = Math.round((ms / size) * 10) / 10;
      return `${n} ${name}${n === 1 ? "" : "s"}`;
    }
  }
  return `${Math.max(1, Math.round(ms / 1000))} seconds`;
}

const plural = (n, word) => `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;

const SESSION_COLOURS = ["#1f6feb", "#b35900", "#1a7f37", "#a40e26", "#6639ba", "#0b7285", "#8a6100", "#bf3989"];
const colourOf = (index) => SESSION_COLOURS[index % SESSION_COLOURS.length];

const GENERATION_WORDS = {
  llm: "written by the configured LLM",
  offline: "built offline from the messages themselves (no LLM configured)",
  fallback: "fallback: the LLM failed or returned unusable output, so it was built from the messages",
};
const BOUNDARY_WORDS = {
  time_gap: "a time gap between messages",
  max_size: "the episode reached its maximum size",
  topic_shift: "the topic shifted",
  flush: "an explicit flush",
  end_of_session: "the end of the session",
  llm: "the LLM segmenter chose this boundary",
  idle: "the session went quiet (no message arrived for a while)",
  open: "not an episode yet: the session's newest messages, found by search and context already; they become "
    + "episodes when the session goes quiet, a topic closes or the session is flushed",
};

function emptyState(title, text) {
  return h("div", { class: "empty" }, h("p", { class: "empty-title" }, title), text ? h("p", {}, text) : null);
}

function metaList(pairs) {
  return h("dl", { class: "meta" }, pairs.filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function jsonText(value) {
  return value && Object.keys(value).length ? JSON.stringify(value) : "—";
}

window.epimemCore = {
  ApiError, api, g, gs, explain, h, fmtTime, fmtSpan, plural, colourOf, GENERATION_WORDS, BOUNDARY_WORDS,
  emptyState, metaList, jsonText,
};
