/* epimem explorer: router, who-am-I, groups and sessions. Views with more logic live in views.js. */
"use strict";

(function () {
  const { api, g, explain, h, fmtTime, plural, emptyState, jsonText } = window.epimemCore;
  const main = document.getElementById("main");
  const banner = document.getElementById("banner");

  const state = { who: null, overview: new Map() };
  const PAGE = 20;

  const canDelete = () => state.who && state.who.role === "admin";
  const route = (...parts) => "#/" + parts.map(encodeURIComponent).join("/");

  function showError(error) {
    if (error && error.status === 401) { keyForm(api.key ? "That key was not accepted. Try another one." : null); return; }
    banner.replaceChildren(h("span", {}, explain(error, state.who && state.who.role)),
      h("button", { class: "link", type: "button", onclick: () => { banner.hidden = true; } }, "Dismiss"));
    banner.hidden = false;
  }
  function clearError() { banner.hidden = true; banner.replaceChildren(); }

  function render(title, ...content) {
    document.title = `${title} · epimem explorer`;
    main.replaceChildren(...content.filter((node) => node !== null && node !== undefined));
    return true;
  }
  let generation = 0;  // a view whose address was left while it loaded must not draw over the new one

  /* Sessions and counts of a group, cached until something is deleted. */
  async function overview(group, fresh) {
    if (fresh || !state.overview.has(group)) {
      state.overview.set(group, await api.get(g(group) + "/overview", { limit: 500 }));
    }
    return state.overview.get(group);
  }

  function tabs(group) {
    const here = location.hash;
    const link = (label, href) => h("a", { href, "aria-current": here === href || here.startsWith(href + "?") ? "page" : null }, label);
    const nav = document.getElementById("tabs");
    nav.replaceChildren(link("Groups", "#/groups"));
    if (!group) return;
    nav.append(
      h("span", { class: "crumb", title: group }, group),
      link("Sessions", route("g", group)),
      link("Timeline", route("g", group, "timeline")),
      link("Search", route("g", group, "search")),
      link("Context", route("g", group, "context")),
      link("Lifecycle", route("g", group, "lifecycle")),
    );
  }

  function whoBox() {
    const box = document.getElementById("who");
    if (!state.who) { box.replaceChildren(); return; }
    const label = state.who.mode === "local" ? "local mode · no key needed" : `key · ${state.who.role}`;
    box.replaceChildren(h("span", { class: "badge role-" + state.who.role }, label));
    if (api.key) {
      box.append(h("button", { class: "link", type: "button", onclick: () => { api.key = null; state.who = null; start(); } },
        "Forget key"));
    }
  }

  function keyForm(problem) {
    tabs(null);
    const input = h("input", { id: "api-key", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
    const form = h("form", {
      class: "card narrow", onsubmit: (event) => {
        event.preventDefault();
        api.key = input.value.trim();
        start();
      },
    },
    h("h1", {}, "This server needs an API key"),
    problem ? h("p", { class: "error", role: "alert" }, problem) : null,
    h("label", { for: "api-key" }, "API key"), input,
    h("p", { class: "hint" }, "The key is kept only in this browser tab (sessionStorage) and sent to this server as "
      + "“Authorization: Bearer …”. It decides which groups and actions you see."),
    h("button", { type: "submit" }, "Use this key"));
    render("API key", form);
    input.focus();
  }

  /* Pages by cursor: `trail` holds the cursors that led to this page (none on the first), `next` the answer's
     next_cursor; `go(trail)` shows the page at the end of a trail. */
  function pager(trail, next, go) {
    if (!trail.length && next === null) return null;
    return h("nav", { class: "pager", "aria-label": "Pages" },
      h("button", { type: "button", class: "secondary", disabled: !trail.length, onclick: () => go(trail.slice(0, -1)) }, "← Previous"),
      h("span", {}, `from ${trail.length * PAGE + 1}`),
      h("button", { type: "button", class: "secondary", disabled: next === null, onclick: () => go([...trail, next]) }, "Next →"));
  }
  const cursorOf = (trail) => trail[trail.length - 1];

  function table(caption, headers, rows) {
    return h("div", { class: "table-wrap" }, h("table", {},
      h("caption", { class: "sr-only" }, caption),
      h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, rows)));
  }

  async function groupsView(ctx, trail = []) {
    const render = ctx.render;
    tabs(null);
    const page = await api.get("/groups", { limit: PAGE, cursor: cursorOf(trail) });
    const heading = h("div", { class: "heading" }, h("h1", {}, "Groups"),
      h("p", { class: "muted" }, "Every group your key can read. A group holds sessions; sessions hold messages, "
        + "which become episodes."));
    if (!page.groups.length) {
      render("Groups", heading, emptyState("No groups yet.",
        "Send messages to a session through the API (or import a conversation with the command line) and they appear here."));
      return;
    }
    const rows = page.groups.map((group) => h("tr", {},
      h("th", { scope: "row" }, h("a", { href: route("g", group.group_id) }, group.group_id),
        group.description ? h("div", { class: "sub" }, group.description) : null),
      h("td", { class: "num" }, group.sessions), h("td", { class: "num" }, group.messages),
      h("td", { class: "num" }, group.episodes), h("td", {}, fmtTime(group.first)), h("td", {}, fmtTime(group.last)),
      h("td", {}, h("a", { href: route("g", group.group_id, "timeline") }, "Timeline"))));
    render("Groups", heading,
      table("Groups", ["Group", "Sessions", "Messages", "Episodes", "First", "Last", ""], rows),
      pager(trail, page.next_cursor, (next) => groupsView(ctx, next).catch(showError)));
  }

  /* The session's declared people (user and agent ids), else who spoke in it. */
  const people = (info, speakers) => {
    const declared = [...info.user_ids, ...info.agent_ids];
    return declared.length ? declared : speakers || [];
  };

  async function sessionsView(ctx, group, trail = []) {
    const render = ctx.render;
    tabs(group);
    const data = await api.get(g(group) + "/overview", { limit: PAGE, cursor: cursorOf(trail) });
    state.overview.delete(group);  // counts may have changed: other views read them afresh
    const totals = data.group;
    const heading = h("div", { class: "heading" }, h("h1", {}, group),
      totals.description ? h("p", {}, totals.description) : null,
      h("ul", { class: "stats" },
        h("li", {}, h("strong", {}, totals.sessions), " sessions"),
        h("li", {}, h("strong", {}, totals.messages), " messages"),
        h("li", {}, h("strong", {}, totals.episodes), " episodes"),
        totals.pending ? h("li", {}, h("strong", {}, totals.pending), " not yet in an episode") : null,
        h("li", {}, fmtTime(totals.first), " → ", fmtTime(totals.last))),
      Object.keys(totals.metadata || {}).length ? h("p", { class: "muted" }, "Metadata: ", jsonText(totals.metadata)) : null);
    if (!data.sessions.length) {
      render(group, heading, emptyState("This group has no sessions.", "Messages sent to a session create it."));
      return;
    }
    const rows = data.sessions.map((item) => {
      const info = item.session;
      return h("tr", { "data-session": info.session_id },
        h("th", { scope: "row" }, h("a", { href: route("g", group, "timeline") + "?session=" + encodeURIComponent(info.session_id) },
          info.title || info.session_id), info.title ? h("div", { class: "sub" }, info.session_id) : null),
        h("td", { class: "num" }, item.messages), h("td", { class: "num" }, item.episodes),
        h("td", { class: "num" }, item.pending ? h("a", { class: "pending-link", title: "messages not in an episode yet",
          href: route("g", group, "s", info.session_id, "e", item.open_episode_id) }, item.pending) : "0"),
        h("td", {}, fmtTime(item.first)), h("td", {}, fmtTime(item.last)),
        h("td", {}, people(info, item.speakers).join(", ") || "—"),
        h("td", { class: "mono" }, jsonText(info.metadata)));
    });
    render(group, heading,
      table("Sessions of " + group, ["Session", "Messages", "Episodes", "Not yet in an episode", "First", "Last", "People", "Metadata"], rows),
      pager(trail, data.next_cursor, (next) => sessionsView(ctx, group, next).catch(showError)));
  }

  const shared = { state, route, overview, canDelete, render, tabs, showError, clearError, table, pager };

  async function dispatch() {
    clearError();
    const [path, search] = location.hash.replace(/^#\/?/, "").split("?");
    let parts;
    try {
      parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    } catch (error) {  // a malformed address (%E0%A4%A): no page, said in the page
      return render("Not found", emptyState("There is no such page.", "The address is malformed. Use the tabs above."));
    }
    const params = new URLSearchParams(search || "");
    const views = window.epimemViews;
    const mine = ++generation;
    const ctx = { ...shared, render: (...args) => mine === generation && render(...args) };
    if (!parts.length || parts[0] === "groups") return groupsView(ctx);
    if (parts[0] !== "g" || !parts[1]) return groupsView(ctx);
    const group = parts[1];
    const view = parts[2];
    if (!view) return sessionsView(ctx, group);
    if (view === "timeline") return views.timeline(ctx, group, params);
    if (view === "search") return views.search(ctx, group, params);
    if (view === "context") return views.context(ctx, group, params);
    if (view === "lifecycle") return views.lifecycle(ctx, group);
    if (view === "s" && parts[4] === "e") return views.episode(ctx, group, parts[3], parts[5], params);
    ctx.render("Not found", emptyState("There is no such page.", "Use the tabs above."));
  }

  async function start() {
    try {
      state.who = await api.get("/auth/whoami");
    } catch (error) {
      state.who = null;
      whoBox();
      if (error.status === 401) { keyForm(api.key ? "That key was not accepted. Try another one." : null); return; }
      showError(error);
      return;
    }
    whoBox();
    await route_();
  }

  async function route_() {
    main.setAttribute("aria-busy", "true");
    const started = generation;
    try {
      await dispatch();
    } catch (error) {
      showError(error);
      // The view that failed must not leave the previous one on screen under its message.
      if (generation === started + 1 && error.status !== 401) {
        render("Not shown", emptyState("Nothing to show here.", "The message above says why. Use the tabs or Groups."));
      }
    } finally {
      main.removeAttribute("aria-busy");
      document.body.dataset.rendered = location.hash;
    }
  }

  window.addEventListener("hashchange", () => { if (state.who) route_(); });
  window.epimem = { ctx: shared, start, refresh: route_ };
  document.addEventListener("DOMContentLoaded", start);
})();
