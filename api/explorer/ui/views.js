/* epimem explorer: timeline, episode, search, context preview, lifecycle. */
"use strict";

(function () {
  const { api, g, gs, explain, h, fmtTime, fmtSpan, plural, colourOf, GENERATION_WORDS, BOUNDARY_WORDS, emptyState, metaList }
    = window.epimemCore;
  const fix = window.epimemCorrections;
  const TIMELINE_PAGE = 100;
  let lastContext = 0;

  function sessionSelect(id, sessions, selected) {
    return h("select", { id, name: "session" }, h("option", { value: "" }, "All sessions"),
      sessions.map((item) => h("option", { value: item.session.session_id, selected: item.session.session_id === selected },
        item.session.title ? `${item.session.title} (${item.session.session_id})` : item.session.session_id)));
  }

  function field(label, control, hint) {
    return h("div", { class: "field" }, h("label", { for: control.id }, label), control,
      hint ? h("span", { class: "hint" }, hint) : null);
  }

  const episodeHref = (ctx, group, episode, message) =>
    ctx.route("g", group, "s", episode.session_id || episode.sessionId, "e", episode.uuid || episode.episode_id)
      + (message ? "?m=" + encodeURIComponent(message) : "");

  /* "Now" for words such as "past 7 days": just after the group's last activity, so that window holds it. */
  const justAfter = (last) => new Date(Date.parse(last) + 1000).toISOString();

  function timeFilter(id, value) {
    return field("Time", h("input", { id, name: "time", value: value || "", placeholder: "e.g. past 7 days, May 2023",
      autocomplete: "off" }), "read by the server's own parser");
  }

  /* -- timeline ----------------------------------------------------------------------------- */

  async function timeline(ctx, group, params) {
    performance.clearMarks("timeline-start");
    performance.mark("timeline-start");
    ctx.tabs(group);
    const data = await ctx.overview(group);
    const session = params.get("session") || "";
    const time = params.get("time") || "";
    const relative = params.get("relative") !== "now";
    const query = { session_id: session, buckets: 80 };
    if (params.get("start")) query.start = params.get("start");
    if (params.get("end")) query.end = params.get("end");
    if (time) {
      query.time = time;
      if (relative && data.group.last) query.reference_time = justAfter(data.group.last);
    }
    const hist = await api.get(g(group) + "/timeline/histogram", query);
    const form = timelineForm(ctx, group, data.sessions, session, time, relative);
    const heading = h("div", { class: "heading" }, h("h1", {}, "Timeline"),
      h("p", { class: "muted" }, session ? `Session ${session} of ${group}` : `Every session of ${group}`));
    if (!hist.total) {
      ctx.render("Timeline", heading, form, emptyState(time || params.get("start") ? "No episodes in this window."
        : "Nothing said yet.", time ? "Try a wider time filter, or clear it."
        : "Messages added to a session show here as soon as they are stored."));
      return;
    }
    const lanes = session ? [session] : data.sessions.map((item) => item.session.session_id).filter((id) => hist.sessions.includes(id));
    for (const id of hist.sessions) if (!lanes.includes(id)) lanes.push(id);
    const loaded = [];
    const list = h("ol", { class: "episodes", "aria-label": "Episodes in this window" });
    const axisSlot = h("div", {});
    const more = h("button", { type: "button", class: "secondary", id: "load-more" }, "Load more");
    const count = h("p", { class: "muted", "aria-live": "polite" });
    let cursor = null;
    const zoomTo = (startMs, endMs) => {
      const next = new URLSearchParams({ start: new Date(startMs).toISOString(), end: new Date(endMs).toISOString() });
      if (session) next.set("session", session);
      location.hash = ctx.route("g", group, "timeline") + "?" + next;
    };
    const open = (episode) => { location.hash = episodeHref(ctx, group, episode); };
    const redraw = () => axisSlot.replaceChildren(window.epimemTimeline.draw({
      hist, episodes: loaded, lanes, onEpisode: open, onBucket: (t, width) => zoomTo(t, t + width) }));
    async function loadPage() {
      more.disabled = true;
      const page = await api.get(g(group) + "/timeline", {
        session_id: session, start: hist.start, end: hist.end, limit: TIMELINE_PAGE, cursor });
      cursor = page.next_cursor;
      const pending = new Set(page.pending || []);
      loaded.push(...page.episodes);
      list.append(...page.episodes.map((episode) => h("li", { class: pending.has(episode.uuid) ? "pending" : null },
        h("span", { class: "swatch", style: `background:${colourOf(lanes.indexOf(episode.session_id))}`, "aria-hidden": "true" }),
        h("time", { datetime: episode.timestamp }, fmtTime(episode.timestamp)),
        h("a", { href: episodeHref(ctx, group, episode) }, episode.title),
        pending.has(episode.uuid) ? h("span", { class: "badge" }, "pending") : null,
        h("span", { class: "sub" }, `${episode.session_id} · ${plural(episode.message_count, "message")} · `
          + (pending.has(episode.uuid) ? "not in an episode yet" : episode.generation)))));
      count.textContent = `Showing ${loaded.length} of ${hist.total} episodes in this window.`;
      more.hidden = !cursor;
      more.disabled = false;
      redraw();
    }
    more.addEventListener("click", () => loadPage().catch(ctx.showError));
    const start = Date.parse(hist.start), end = Date.parse(hist.end), span = end - start, mid = start + span / 2;
    const zoom = h("div", { class: "toolbar", role: "group", "aria-label": "Zoom and pan" },
      h("button", { type: "button", class: "secondary", onclick: () => zoomTo(start - span / 2, start + span / 2) }, "← Earlier"),
      h("button", { type: "button", class: "secondary", id: "zoom-in", disabled: span <= 36e5,
        onclick: () => zoomTo(mid - span / 4, mid + span / 4) }, "Zoom in"),
      h("button", { type: "button", class: "secondary", id: "zoom-out", onclick: () => zoomTo(mid - span, mid + span) }, "Zoom out"),
      h("button", { type: "button", class: "secondary", onclick: () => zoomTo(end - span / 2, end + span / 2) }, "Later →"),
      h("a", { class: "button secondary", href: ctx.route("g", group, "timeline") + (session ? "?session=" + encodeURIComponent(session) : "") }, "Fit all"),
      h("span", { class: "muted", id: "window" }, `${fmtTime(start)} → ${fmtTime(end)} · ${fmtSpan(span)}`));
    const legend = h("ul", { class: "legend", "aria-label": "Sessions" }, lanes.map((id, index) =>
      h("li", {}, h("span", { class: "swatch", style: `background:${colourOf(index)}`, "aria-hidden": "true" }), id)));
    if (!ctx.render("Timeline", heading, form, zoom, axisSlot, legend, count, list, more)) return;
    await loadPage();
    performance.mark("timeline-rendered");
    const measure = performance.measure("timeline", "timeline-start", "timeline-rendered");
    window.epimemTimelineMs = measure.duration;
    document.body.dataset.timelineReady = String(Date.now());
  }

  function timelineForm(ctx, group, sessions, session, time, relative) {
    const select = sessionSelect("tl-session", sessions, session);
    const input = timeFilter("tl-time", time);
    const box = h("input", { type: "checkbox", id: "tl-relative", checked: relative });
    return h("form", { class: "filters", onsubmit: (event) => {
      event.preventDefault();
      const next = new URLSearchParams();
      if (select.value) next.set("session", select.value);
      const text = input.querySelector("input").value.trim();
      if (text) next.set("time", text);
      if (!box.checked) next.set("relative", "now");
      location.hash = ctx.route("g", group, "timeline") + (next.toString() ? "?" + next : "");
    } },
    field("Session", select), input,
    h("div", { class: "field check" }, box, h("label", { for: "tl-relative" }, "Count back from the group's last activity (not today): “past 7 days” ends with it")),
    h("div", { class: "field" }, h("button", { type: "submit" }, "Apply")));
  }

  /* -- episode ------------------------------------------------------------------------------- */

  async function episode(ctx, group, session, id, params) {
    ctx.tabs(group);
    const data = await api.get(gs(group, session) + "/episodes/" + encodeURIComponent(id), { expand: "messages" });
    const ep = data.episode;
    const highlight = params.get("m");
    const receipt = h("div", { "aria-live": "polite" });
    const status = h("div", { "aria-live": "polite", id: "episode-status" });
    // What a delete left of this page: the deleted messages go; an episode that is gone keeps no live controls
    // (they would only answer 404); one rebuilt from its remaining messages offers to show the new text.
    const afterDelete = (done) => {
      if (!done) return;
      for (const id of done.messages || []) document.getElementById("m-" + id)?.remove();
      if ((done.episodes || []).includes(ep.uuid)) {
        for (const control of document.querySelectorAll("main button, main input, main textarea, main select")) {
          if (!receipt.contains(control)) control.disabled = true;
        }
        status.replaceChildren(h("p", { class: "badge", id: "episode-gone" }, "This episode no longer exists."));
      } else if ((done.repaired || []).includes(ep.uuid)) {
        status.replaceChildren(h("p", { id: "episode-rebuilt" }, "The episode was rebuilt from its remaining messages. ",
          h("button", { type: "button", class: "secondary small", onclick: () => window.epimem.refresh() }, "Show it")));
      }
    };
    const messages = (data.messages || []).map((message) => h("li", {
      class: "message" + (message.id === highlight ? " highlight" : ""), id: "m-" + message.id, "data-message": message.id },
    h("div", { class: "who-line" }, h("strong", {}, message.producer_id || message.role),
      h("time", { datetime: message.timestamp }, fmtTime(message.timestamp)), h("span", { class: "sub" }, "id " + message.id)),
    h("p", {}, message.content),
    ctx.canDelete() ? h("button", { type: "button", class: "danger small", "aria-label": `Delete message ${message.id}`,
      onclick: async () => afterDelete(await remove(ctx, group, `message ${message.id}`, "Its episode is rebuilt from the "
        + "remaining messages (or deleted when none remain).", gs(group, session) + "/messages/" + encodeURIComponent(message.id),
      receipt)) },
    "Delete message") : null,
    data.pending ? null : fix.redactButton(ctx, group, session, message, receipt)));
    ctx.render(ep.title,
      h("p", {}, h("a", { href: ctx.route("g", group, "timeline") + "?session=" + encodeURIComponent(session) }, "← Timeline of " + session)),
      h("article", { class: "card" + (data.pending ? " pending" : "") },
        data.pending ? h("p", { class: "badge", id: "pending-note" }, "Open stretch — not an episode yet") : null,
        h("h1", {}, ep.title),
        metaList([
          ["Time", fmtTime(ep.timestamp)], ["Session", ep.session_id], ["Kind", ep.episode_type],
          ["Made by", `${ep.generation} — ${GENERATION_WORDS[ep.generation] || ""}`],
          ["Boundary", `${ep.boundary_reason} — ${BOUNDARY_WORDS[ep.boundary_reason] || ""}`],
          ["Messages", ep.message_count], ["Stored", fmtTime(ep.created_at)], ["Id", ep.uuid],
          ["Summarised by", ep.summarised_by]]),
        h("p", { class: "content" }, ep.content),
        ctx.canDelete() && !data.pending ? h("button", { type: "button", class: "danger", id: "delete-episode",
          onclick: async () => afterDelete(await remove(ctx, group, `episode “${ep.title}”`,
            "The episode and the messages it was made of are deleted.",
            gs(group, session) + "/episodes/" + encodeURIComponent(ep.uuid), receipt)) }, "Delete episode") : null),
      h("div", { "aria-live": "polite", id: "correction-out" }),
      status,
      receipt,
      data.pending ? null : fix.correctionForm(ctx, group, session, ep, receipt),
      data.pending ? null : fix.revisionsList(group, session, ep),
      h("h2", {}, "Source messages, in order"),
      messages.length ? h("ol", { class: "messages" }, messages) : emptyState("No source messages.", null));
    if (highlight) document.getElementById("m-" + highlight)?.scrollIntoView({ block: "center" });
  }

  /* -- search -------------------------------------------------------------------------------- */

  async function search(ctx, group, params) {
    ctx.tabs(group);
    const data = await ctx.overview(group);
    const results = h("div", { "aria-live": "polite", id: "results" });
    const q = h("input", { id: "s-query", name: "query", required: true, value: params.get("q") || "", autocomplete: "off" });
    const k = h("input", { id: "s-k", name: "k", type: "number", min: 1, max: 200, value: 10 });
    const select = sessionSelect("s-session", data.sessions, "");
    const time = timeFilter("s-time", "");
    const speaker = fix.speakerInput("s-speaker");
    const form = h("form", { class: "filters", role: "search", onsubmit: async (event) => {
      event.preventDefault();
      const body = { query: q.value, k: Number(k.value) || 10, filter: fix.filterOf(speaker) };
      if (select.value) body.session_ids = [select.value];
      const text = time.querySelector("input").value.trim();
      if (text) { body.time = text; if (data.group.last) body.reference_time = justAfter(data.group.last); }
      results.replaceChildren(h("p", { class: "muted" }, "Searching…"));
      try {
        const out = await api.request("POST", g(group) + "/search", { body });
        results.replaceChildren(...renderHits(ctx, group, out.hits));
      } catch (error) {
        results.replaceChildren(h("p", { class: "error" }, explain(error, ctx.state.who.role)));
      }
    } },
    field("Query", q), field("Results (k)", k), field("Session", select), time,
    field("Speaker", speaker, "only what they said; an id or a name, commas for several"),
    h("div", { class: "field" }, h("button", { type: "submit" }, "Search")));
    ctx.render("Search", h("div", { class: "heading" }, h("h1", {}, "Search"),
      h("p", { class: "muted" }, "By meaning and keyword; each hit shows the score parts the API returns.")), form, results);
    q.focus();
  }

  function renderHits(ctx, group, hits) {
    if (!hits.length) return [emptyState("No episodes match.", "Try other words, or remove the session and time filters.")];
    const top = (name) => Math.max(1e-9, ...hits.map((hit) => hit.components[name]));
    const bar = (name, value, max) => h("div", { class: "component" }, h("span", {}, name),
      h("meter", { min: 0, max, value: Math.min(value, max), "aria-label": name }), h("span", { class: "mono" }, value.toFixed(3)));
    return [h("p", { class: "muted" }, plural(hits.length, "hit")), h("ol", { class: "hits" }, hits.map((hit) => h("li", { class: "card hit" },
      h("div", { class: "hit-head" }, h("a", { href: episodeHref(ctx, group, hit.episode) }, hit.episode.title),
        h("span", { class: "score", title: `score from 0 to 1, the same scale for every query (raw ${hit.components.raw.toFixed(3)})` },
          hit.score.toFixed(3))),
      h("div", { class: "sub" }, `${fmtTime(hit.episode.timestamp)} · ${hit.episode.session_id} · `
        + (hit.pending ? "pending: not in an episode yet" : hit.episode.generation)),
      h("p", {}, hit.episode.content.length > 280 ? hit.episode.content.slice(0, 280) + "…" : hit.episode.content),
      h("div", { class: "components", title: "bars: relative to the best hit (vector and recency: out of 1)" },
        bar("vector", hit.components.vector, 1), bar("keyword", hit.components.keyword, top("keyword")),
        bar("fused", hit.components.fused, top("fused")), bar("recency", hit.components.recency, 1)),
      hit.matched_message_ids.length ? h("div", { class: "sub" }, "matched messages: ",
        hit.matched_message_ids.map((m) => h("a", { href: episodeHref(ctx, group, hit.episode, m), class: "chip" }, m))) : null)))];
  }

  /* -- context preview ------------------------------------------------------------------------ */

  async function context(ctx, group) {
    ctx.tabs(group);
    const data = await ctx.overview(group);
    const out = h("div", { id: "context-out", "aria-live": "polite" });
    const q = h("input", { id: "c-query", required: true, autocomplete: "off" });
    const budget = h("input", { id: "c-budget", type: "range", min: 16, max: 2000, step: 4, value: 300 });  // 300 on the steps
    const shown = h("output", { for: "c-budget", id: "c-budget-value" }, "300 tokens");
    const speaker = fix.speakerInput("c-speaker");
    let timer = null;
    const build = async () => {
      if (!q.value.trim()) return;
      const ticket = ++lastContext;
      const body = { query: q.value, token_budget: Number(budget.value), filter: fix.filterOf(speaker) };
      try {
        const result = await api.request("POST", g(group) + "/context", { body });
        if (ticket === lastContext) out.replaceChildren(...renderContext(ctx, group, result, body.token_budget));
      } catch (error) {
        if (ticket === lastContext) out.replaceChildren(h("p", { class: "error" }, explain(error, ctx.state.who.role)));
      }
    };
    budget.addEventListener("input", () => {
      shown.textContent = `${budget.value} tokens`;
      clearTimeout(timer);
      timer = setTimeout(build, 200);
    });
    const form = h("form", { class: "filters", onsubmit: (event) => { event.preventDefault(); build(); } },
      field("Question", q), h("div", { class: "field" }, h("label", { for: "c-budget" }, "Token budget"), budget, shown),
      field("Speaker", speaker, "cite only what they said; an id or a name, commas for several"),
      h("div", { class: "field" }, h("button", { type: "submit" }, "Build context")));
    ctx.render("Context", h("div", { class: "heading" }, h("h1", {}, "Context preview"),
      h("p", { class: "muted" }, `The exact text a prompt would receive from ${group}, with what each piece cites.`)),
    form, out);
    q.focus();
  }

  /* Split the text into its pieces. Each opens with its citation's marker ("[1] ") on its first message line,
     under its day's date line ("[8 May 2023]", before the day's first piece); then as many message lines as the
     citation has ids ("…": turns left out). A message's further lines are indented: they belong to the line
     before them. */
  function pieces(text, citations) {
    const lines = [];
    for (const line of text.split("\n").slice(1)) {
      if (line.startsWith(" ") && lines.length) lines[lines.length - 1] += "\n" + line;
      else lines.push(line);
    }
    const out = [];
    let at = 0;
    for (const citation of citations) {
      const opens = (line) => Boolean(citation.marker) && line !== undefined && line.startsWith(citation.marker + " ");
      const piece = { citation, day: null, lines: [] };
      if (!opens(lines[at]) && /^\[\d{1,2} \w+ \d{4}\]$/.test(lines[at] ?? "")) piece.day = lines[at++];
      if (!opens(lines[at])) return null;
      const opening = lines[at++].slice(citation.marker.length + 1);
      let seen = 0;
      piece.lines.push({ text: opening, message: citation.message_ids[seen++], marked: true });
      while (at < lines.length && seen < citation.message_ids.length) {
        const line = lines[at++];
        piece.lines.push({ text: line, message: line === "…" ? null : citation.message_ids[seen++] });
      }
      if (seen !== citation.message_ids.length) return null;
      out.push(piece);
    }
    return at === lines.length ? out : null;
  }

  function renderContext(ctx, group, result, budget) {
    const meter = h("div", { class: "budget" }, h("meter", { min: 0, max: budget, value: result.tokens, id: "c-meter",
      "aria-label": "tokens used" }), h("span", { id: "c-tokens" }, `${result.tokens} of ${budget} tokens`),
    h("span", { class: "muted" }, ` · ${plural(result.citations.length, "cited episode")}`));
    if (!result.text) return [meter, emptyState("Nothing fits.", "No memory matched the question, or the budget is too small.")];
    const split = pieces(result.text, result.citations);
    if (!split) return [meter, h("pre", { class: "context" }, result.text)];
    const text = result.text.split("\n")[0];
    // The marker of each piece links to its episode (the citation of the same marker).
    const cite = (piece) => h("a", { href: episodeHref(ctx, group, piece.citation), class: "cite",
      title: `citation ${piece.citation.marker}: episode ${piece.citation.episode_id}` }, piece.citation.marker);
    // A message held in part ("speaker (excerpt): … text …") names its span; its link opens the episode, where it is whole.
    const excerptOf = (piece, id) => (piece.citation.excerpts || []).find((excerpt) => excerpt.message_id === id);
    const message = (piece, line) => {
      const excerpt = excerptOf(piece, line.message);
      const title = excerpt
        ? `excerpt of message ${line.message}: characters ${excerpt.start}-${excerpt.end} (open it whole)`
        : "message " + line.message;
      return h("a", { class: excerpt ? "ctx-line ctx-excerpt" : "ctx-line", href: episodeHref(ctx, group, piece.citation, line.message),
        "data-message": line.message, "data-span": excerpt ? `${excerpt.start}-${excerpt.end}` : null, title }, line.text);
    };
    return [meter, h("div", { class: "context", id: "c-text" }, h("div", { class: "ctx-line muted" }, text),
      split.map((piece) => [
        piece.day ? h("div", { class: "ctx-line ctx-head ctx-day" }, piece.day) : null,
        h("section", { class: "piece", "data-episode": piece.citation.episode_id, "data-marker": piece.citation.marker,
          "aria-label": `piece ${piece.citation.marker}` },
        piece.lines.map((line) => line.marked
          ? h("div", { class: "ctx-line ctx-marked" }, cite(piece), " ", message(piece, line))
          : line.message ? message(piece, line) : h("div", { class: "ctx-line muted" }, line.text)))]))];
  }

  /* -- lifecycle ----------------------------------------------------------------------------- */

  async function remove(ctx, group, what, consequence, path, slot) {
    const dialog = document.getElementById("confirm");
    document.getElementById("confirm-title").textContent = `Delete ${what}?`;
    document.getElementById("confirm-text").textContent = consequence + " This cannot be undone.";
    dialog.returnValue = "";
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
    const answer = await new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
    if (answer !== "ok") return null;
    try {
      const receipt = await api.del(path);
      ctx.state.overview.delete(group);
      slot.replaceChildren(receiptCard(what, receipt));
      slot.querySelector("h2").focus();
      return receipt;
    } catch (error) {
      slot.replaceChildren(h("p", { class: "error", role: "alert" }, explain(error, ctx.state.who && ctx.state.who.role)));
      return null;
    }
  }

  function receiptCard(what, receipt) {
    const n = (list) => (list || []).length;
    return h("section", { class: "card receipt", id: "receipt" },
      h("h2", { tabindex: "-1" }, `Deleted ${what}`),
      h("ul", { class: "stats" },
        [["messages", "message"], ["episodes", "episode"], ["summaries", "summary"], ["collections", "collection"]]
          .map(([key, word]) => h("li", {}, h("strong", {}, n(receipt[key])), " ", n(receipt[key]) === 1 ? word : key)),
        h("li", {}, h("strong", {}, receipt.vectors), receipt.vectors === 1 ? " vector" : " vectors"),
        h("li", {}, h("strong", {}, n(receipt.repaired)), " rebuilt")),
      h("details", {}, h("summary", {}, "Full receipt"), h("pre", {}, JSON.stringify(receipt, null, 2))));
  }

  async function exportGroup(ctx, group, embeddings, slot) {
    try {
      const response = await api.request("GET", g(group) + "/export", { query: { include_embeddings: embeddings }, raw: true });
      const blob = await response.blob();
      const link = h("a", { href: URL.createObjectURL(blob), download: `${group}.jsonl` });
      document.body.append(link);
      link.click();
      link.remove();
      slot.replaceChildren(h("p", { class: "ok" }, `Exported ${group} (${blob.size.toLocaleString("en")} bytes, JSON Lines).`));
    } catch (error) {
      slot.replaceChildren(h("p", { class: "error", role: "alert" }, explain(error, ctx.state.who.role)));
    }
  }

  async function lifecycle(ctx, group) {
    ctx.tabs(group);
    const data = await ctx.overview(group, true);
    const slot = h("div", { "aria-live": "polite", id: "lifecycle-out" });
    const heading = h("div", { class: "heading" }, h("h1", {}, "Lifecycle"),
      h("p", { class: "muted" }, "Export the group, or delete sessions. Every deletion asks first and shows its receipt. "
        + "Single episodes and messages are deleted from the episode page."));
    if (!ctx.canDelete()) {
      ctx.render("Lifecycle", heading, h("div", { class: "card notice", id: "read-only" },
        h("p", {}, `Your key's role is “${ctx.state.who.role}”: you can look, but deleting and exporting need an admin key.`)));
      return;
    }
    const embeddings = h("input", { type: "checkbox", id: "x-embeddings" });
    const rows = data.sessions.map((item) => h("tr", { "data-session": item.session.session_id },
      h("th", { scope: "row" }, item.session.title || item.session.session_id),
      h("td", { class: "num" }, item.messages), h("td", { class: "num" }, item.episodes), h("td", {}, fmtTime(item.last)),
      h("td", {}, h("button", { type: "button", class: "danger small", "aria-label": `Delete session ${item.session.session_id}`,
        onclick: async () => {
          const receipt = await remove(ctx, group, `session ${item.session.session_id}`,
            `Its ${plural(item.messages, "message")} and ${plural(item.episodes, "episode")} are deleted; group summaries citing it are rebuilt.`,
            gs(group, item.session.session_id), slot);
          if (receipt) document.querySelector(`tr[data-session="${CSS.escape(item.session.session_id)}"]`)?.remove();
        } }, "Delete"))));
    ctx.render("Lifecycle", heading,
      h("section", { class: "card" }, h("h2", {}, "Export"),
        h("p", {}, "The whole group as JSON Lines, the format that ", h("code", {}, "epimem import"), " and ",
          h("code", {}, "POST …/import"), " read back."),
        h("div", { class: "field check" }, embeddings, h("label", { for: "x-embeddings" }, "include the vectors")),
        h("button", { type: "button", id: "export", onclick: () => exportGroup(ctx, group, embeddings.checked, slot) }, "Download export")),
      slot,
      fix.auditTrail(group),
      h("h2", {}, "Sessions"),
      rows.length ? ctx.table("Sessions to delete", ["Session", "Messages", "Episodes", "Last", ""], rows)
        : emptyState("No sessions left.", null));
  }

  window.epimemViews = { timeline, episode, search, context, lifecycle, remove };
})();
