/* epimem explorer: the time axis of a timeline. Lanes per session; bars = how many episodes fall in
   each slice (from the histogram route, counts only); dots = the episodes loaded so far (paged). */
"use strict";

(function () {
  const { h, colourOf, fmtTime } = window.epimemCore;
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 1000;
  const LABEL = 130;
  const LANE = 34;
  const AXIS = 26;

  function s(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, String(value));
    }
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return node;
  }

  const MINUTE = 6e4, HOUR = 36e5, DAY = 864e5;
  const STEPS = [
    [MINUTE, "m"], [5 * MINUTE, "m"], [15 * MINUTE, "m"], [HOUR, "h"], [3 * HOUR, "h"], [6 * HOUR, "h"],
    [12 * HOUR, "h"], [DAY, "d"], [2 * DAY, "d"], [7 * DAY, "d"], [30 * DAY, "mo"], [91 * DAY, "mo"],
    [182 * DAY, "mo"], [365 * DAY, "y"], [2 * 365 * DAY, "y"], [5 * 365 * DAY, "y"], [10 * 365 * DAY, "y"],
  ];

  /* Tick positions at round calendar times (UTC) for a window [start, end) in ms. */
  function ticks(start, end) {
    const span = end - start;
    const [step, unit] = STEPS.find(([size]) => span / size <= 8) || STEPS[STEPS.length - 1];
    const out = [];
    const first = new Date(start);
    let t;
    if (unit === "y" || unit === "mo") {
      const months = unit === "y" ? Math.round(step / (365 * DAY)) * 12 : Math.round(step / (30 * DAY));
      const m0 = first.getUTCFullYear() * 12 + first.getUTCMonth();
      let m = Math.ceil(m0 / months) * months;
      for (; (t = Date.UTC(Math.floor(m / 12), m % 12, 1)) < end; m += months) if (t >= start) out.push(t);
    } else {
      for (t = Math.ceil(start / step) * step; t < end; t += step) out.push(t);
    }
    const label = (time) => {
      const iso = new Date(time).toISOString();
      if (unit === "y") return iso.slice(0, 4);
      if (unit === "mo") return iso.slice(0, 7);
      if (unit === "d") return iso.slice(0, 10);
      return iso.slice(5, 16).replace("T", " ");
    };
    return out.map((time) => ({ time, label: label(time) }));
  }

  /* hist: the histogram response; episodes: loaded ones; lanes: session ids in display order. */
  function draw({ hist, episodes, lanes, onBucket, onEpisode }) {
    const start = Date.parse(hist.start), end = Date.parse(hist.end);
    const height = AXIS + lanes.length * LANE + 6;
    const x = (time) => LABEL + ((time - start) / (end - start)) * (WIDTH - LABEL - 10);
    const bucketWidth = (WIDTH - LABEL - 10) / hist.counts[0].length;
    const max = Math.max(1, ...hist.counts.flat());
    const svg = s("svg", {
      viewBox: `0 0 ${WIDTH} ${height}`, class: "axis", role: "img",
      "aria-label": `Timeline from ${fmtTime(start)} to ${fmtTime(end)}: ${hist.total} episodes in ${lanes.length} sessions`,
    });
    for (const tick of ticks(start, end)) {
      svg.append(s("line", { x1: x(tick.time), x2: x(tick.time), y1: AXIS - 6, y2: height, class: "tick" }));
      if (x(tick.time) < WIDTH - 80) svg.append(s("text", { x: x(tick.time) + 3, y: AXIS - 10, class: "tick-label" }, tick.label));
    }
    lanes.forEach((session, lane) => {
      const top = AXIS + lane * LANE;
      const colour = colourOf(lane);
      svg.append(s("rect", { x: 0, y: top, width: WIDTH, height: LANE - 2, class: lane % 2 ? "lane odd" : "lane" }));
      svg.append(s("text", { x: 6, y: top + LANE / 2 + 4, class: "lane-label" },
        session.length > 16 ? session.slice(0, 15) + "…" : session));
      const row = hist.counts[hist.sessions.indexOf(session)] || [];
      row.forEach((count, index) => {
        if (!count) return;
        const barHeight = Math.max(3, ((LANE - 8) * count) / max);
        const bar = s("rect", {
          x: LABEL + index * bucketWidth + 0.5, y: top + LANE - 3 - barHeight, width: Math.max(1, bucketWidth - 1),
          height: barHeight, fill: colour, class: "bar", "data-bucket": index,
          onclick: () => onBucket(start + index * hist.bucket_seconds * 1000, hist.bucket_seconds * 1000),
        }, s("title", {}, `${count} episode${count === 1 ? "" : "s"} in ${session} — click to zoom in`));
        svg.append(bar);
      });
    });
    for (const episode of episodes) {
      const lane = lanes.indexOf(episode.session_id);
      const time = Date.parse(episode.timestamp);
      if (lane < 0 || time < start || time >= end) continue;
      svg.append(s("circle", {
        cx: x(time), cy: AXIS + lane * LANE + 9, r: 4.5, class: "dot", stroke: colourOf(lane),
        "data-episode": episode.uuid, onclick: () => onEpisode(episode),
      }, s("title", {}, `${fmtTime(time)} — ${episode.title}`)));
    }
    return h("div", { class: "axis-wrap" }, svg);
  }

  window.epimemTimeline = { draw, ticks };
})();
