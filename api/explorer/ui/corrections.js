/* epimem explorer: correcting memory — an episode's correction form and revisions, redacting a message
   (after a confirmation that names what goes), the speaker filter of search and context, the audit trail. */
"use strict";

(function () {
  const { api, g, gs, explain, h, fmtTime, emptyState } = window.epimemCore;

  const role = (ctx) => (ctx.state.who && ctx.state.who.role) || "read";
  const canWrite = (ctx) => ["write", "admin"].includes(role(ctx));
  const clip = (text, n) => (text.length > n ? text.slice(0, n - 1) + "…" : text);

  /* -- the speaker filter of search and context ------------------------------------------------ */

  function speakerInput(id) {
    return h("input", { id, autocomplete: "off", placeholder: "anyone" });
  }

  /* The request's filter (undefined: none): speakers by id or by a name the ranking knows, comma-separated. */
  function filterOf(input) {
    const speakers = input.value.split(",").map((s) => s.trim()).filter(Boolean);
    return speakers.length ? { speakers } : undefined;
  }

  /* -- the episode page ------------------------------------------------------------------------- */

  function correctionForm(ctx, group, session, ep, slot) {
    if (!canWrite(ctx) || ep.episode_type !== "episode") return null;
    const title = h("input", { id: "fix-title", value: ep.title, maxlength: 500, required: true });
    const content = h("textarea", { id: "fix-content", rows: 5, maxlength: 100000, required: true });
    content.value = ep.content;
    const reason = h("input", { id: "fix-reason", maxlength: 1000, autocomplete: "off", placeholder: "what was wrong" });
    const form = h("form", { class: "card correction", id: "correct-form", onsubmit: async (event) => {
      event.preventDefault();
      const body = {};
      if (title.value !== ep.title) body.title = title.value;
      if (content.value !== ep.content) body.content = content.value;
      if (!Object.keys(body).length) {
        slot.replaceChildren(h("p", { class: "muted" }, "Nothing changed: edit the title or the text first."));
        return;
      }
      if (reason.value.trim()) body.reason = reason.value.trim();
      try {
        const path = gs(group, session) + "/episodes/" + encodeURIComponent(ep.uuid);
        await api.request("PATCH", path, { body });
        await window.epimem.refresh();
        document.getElementById("correction-out")?.replaceChildren(
          h("p", { class: "ok", id: "corrected" }, "Corrected: search, context and the timeline show it now."));
      } catch (error) {
        slot.replaceChildren(h("p", { class: "error", role: "alert" }, explain(error, role(ctx))));
      }
    } },
    h("h2", {}, "Correct this episode"),
    h("p", { class: "muted" }, "The earlier text stays in the revisions below; the source messages are not changed."),
    h("div", { class: "field" }, h("label", { for: "fix-title" }, "Title"), title),
    h("div", { class: "field" }, h("label", { for: "fix-content" }, "Text"), content),
    h("div", { class: "field" }, h("label", { for: "fix-reason" }, "Reason (kept with the revision)"), reason),
    h("button", { type: "submit", id: "save-correction" }, "Save correction"));
    return form;
  }

  function revisionsList(group, session, ep) {
    const list = h("ol", { class: "revisions", id: "revisions", "aria-label": "Revisions, oldest first" },
      h("li", { class: "muted" }, "Loading…"));
    if (ep.episode_type !== "episode") return null;
    const path = gs(group, session) + "/episodes/" + encodeURIComponent(ep.uuid) + "/revisions";
    api.get(path).then((out) => {
      list.replaceChildren(...out.revisions.map((r) => h("li", { class: "revision", "data-kind": r.kind },
        h("div", { class: "who-line" }, h("strong", {}, `#${r.revision} ${r.kind}`),
          h("time", { datetime: r.changed_at }, fmtTime(r.changed_at)), h("span", { class: "sub" }, "by " + r.changed_by),
          r.superseded ? h("span", { class: "badge" }, "superseded") : null,
          r.erased ? h("span", { class: "badge" }, "text erased") : null),
        r.erased ? null : h("p", {}, h("strong", {}, r.title), " — ", clip(r.content, 300)),
        r.reason ? h("p", { class: "sub" }, "Reason: " + r.reason) : null)));
    }).catch((error) => list.replaceChildren(h("li", { class: "error" }, explain(error, null))));
    return h("section", {}, h("h2", {}, "Revisions"), list);
  }

  /* The shared confirmation dialog, worded for a redaction: it names the message, quotes what goes and what
     takes its place. */
  async function confirmRedaction(message, replacement) {
    const dialog = document.getElementById("confirm");
    const ok = document.getElementById("confirm-ok");
    document.getElementById("confirm-title").textContent = `Redact message ${message.id}?`;
    document.getElementById("confirm-text").textContent = `The text of ${message.producer_id || message.role}'s message `
      + `“${clip(message.content, 200)}” is removed for good and replaced by “${replacement}”. Its id, speaker and time `
      + "stay; the episode is made again without it, and earlier revisions lose their text. This cannot be undone.";
    ok.textContent = "Redact";
    dialog.returnValue = "";
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
    const answer = await new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
    ok.textContent = "Delete";
    return answer === "ok";
  }

  function redactButton(ctx, group, session, message, slot) {
    if (role(ctx) !== "admin" || (message.metadata || {}).epimem_redacted) return null;
    return h("button", { type: "button", class: "danger small", "aria-label": `Redact message ${message.id}`,
      onclick: async () => {
        if (!await confirmRedaction(message, "[redacted]")) return;
        try {
          const path = gs(group, session) + "/messages/" + encodeURIComponent(message.id) + "/redact";
          const receipt = await api.request("POST", path, { body: {} });
          ctx.state.overview.delete(group);
          await window.epimem.refresh();
          document.getElementById("correction-out")?.replaceChildren(h("p", { class: "ok", id: "redacted" },
            `Redacted message ${receipt.message_id}; rebuilt ${receipt.episodes.length} episode(s) and `
            + `${receipt.summaries.length} summary(ies).`));
        } catch (error) {
          slot.replaceChildren(h("p", { class: "error", role: "alert" }, explain(error, role(ctx))));
        }
      } }, "Redact");
  }

  /* -- the lifecycle view: the audit trail ------------------------------------------------------- */

  function auditTrail(group) {
    const rows = h("tbody", {});
    const more = h("div", {});
    const load = async (cursor) => {
      const page = await api.get(g(group) + "/audit", { limit: 50, cursor });
      rows.append(...page.entries.map((e) => h("tr", { "data-action": e.action },
        h("td", {}, fmtTime(e.at)), h("td", {}, e.actor), h("td", {}, e.action), h("td", {}, e.session_id || "—"),
        h("td", {}, e.target_ids.join(", ") + (e.target_count > e.target_ids.length ? ` (+${e.target_count - e.target_ids.length})` : "")))));
      more.replaceChildren(page.next_cursor ? h("button", { type: "button", class: "secondary",
        onclick: () => load(page.next_cursor).catch((error) => more.replaceChildren(h("p", { class: "error" }, explain(error, null)))) },
      "Older entries") : null);
      if (!rows.children.length) more.replaceChildren(emptyState("Nothing recorded yet.", null));
    };
    load(null).catch((error) => more.replaceChildren(h("p", { class: "error" }, explain(error, null))));
    return h("section", { class: "card", id: "audit" }, h("h2", {}, "Audit trail"),
      h("p", { class: "muted" }, "Every change to this group's memory, newest first: who, what, which ids — never the content."),
      h("div", { class: "table-wrap" }, h("table", { "aria-label": "Audit trail" },
        h("thead", {}, h("tr", {}, ["When", "Who", "Action", "Session", "Ids"].map((c) => h("th", { scope: "col" }, c)))), rows)),
      more);
  }

  window.epimemCorrections = { speakerInput, filterOf, correctionForm, revisionsList, redactButton, auditTrail };
})();
