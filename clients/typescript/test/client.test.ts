// Every call of the client against a real epimem: what goes in comes back, in the HTTP API's own field names.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { CHAT, LATER, client, newGroup } from "./helpers.js";

const memory = client();
const group = newGroup("calls");

describe("calls", () => {
  before(async () => {
    const first = await memory.addMessages(group, "chat-1", CHAT);
    assert.deepEqual(first.accepted, ["m1", "m2"]);
    await memory.addMessages(group, "chat-2", LATER);
  });
  after(async () => {
    await memory.deleteGroup(group);
  });

  test("addMessages is idempotent by id", async () => {
    const again = await memory.addMessages(group, "chat-1", [CHAT[0]!]);
    assert.deepEqual(again.accepted, []);
    assert.deepEqual(again.duplicates, ["m1"]);
  });

  test("flush forms the episodes and getEpisode expands them to their messages", async () => {
    const episodes = await memory.flush(group, "chat-1");
    assert.ok(episodes.length >= 1);
    const episode = episodes[0]!;
    assert.equal(episode.group_id, group);
    assert.equal(episode.session_id, "chat-1");
    const plain = await memory.getEpisode(group, "chat-1", episode.uuid);
    assert.equal(plain.episode.uuid, episode.uuid);
    assert.equal(plain.messages ?? null, null);
    const expanded = await memory.getEpisode(group, "chat-1", episode.uuid, { expand: true });
    assert.deepEqual(expanded.messages?.map((m) => m.id), episode.source_message_ids);
    assert.equal((await memory.flush(group, "chat-2")).length >= 1, true);
  });

  test("search ranks by meaning and scopes by session and time", async () => {
    const hits = await memory.search(group, { query: "Who has a dog?", k: 5 });
    assert.ok(hits.length >= 1);
    assert.equal(hits[0]!.episode.session_id, "chat-1");
    assert.ok(hits[0]!.score > 0 && typeof hits[0]!.components.vector === "number");
    // Scores are on one 0..1 scale (the same for every query); min_score keeps the hits scoring at least it.
    assert.ok(hits.every((hit) => hit.score > 0 && hit.score < 1 && typeof hit.components.raw === "number"));
    const threshold = hits[0]!.score;
    const above = await memory.search(group, { query: "Who has a dog?", k: 5, min_score: threshold });
    assert.deepEqual(above.map((hit) => hit.episode.uuid), hits.filter((hit) => hit.score >= threshold).map((hit) => hit.episode.uuid));

    const scoped = await memory.search(group, { query: "Who has a dog?", session_ids: ["chat-2"] });
    assert.ok(scoped.length >= 1 && scoped.every((hit) => hit.episode.session_id === "chat-2"));

    const june = await memory.search(group, {
      query: "bread",
      time: "last week",
      reference_time: "2023-06-26T00:00:00Z", // a Monday: last week is 19-25 June
      expand: true,
    });
    assert.ok(june.length >= 1 && june.every((hit) => hit.episode.session_id === "chat-2"));
    assert.ok(june[0]!.messages?.some((m) => m.content.includes("sourdough")));
    const text = await memory.search(group, "sourdough");
    assert.equal(text[0]!.episode.session_id, "chat-2");
  });

  test("context packs cited memory within the token budget", async () => {
    const context = await memory.context(group, { query: "Where could Rex go hiking?", token_budget: 200 });
    assert.match(context.text, /Lake Tahoe/);
    assert.ok(context.tokens <= 200);
    assert.ok(context.citations.some((c) => c.session_id === "chat-1" && c.message_ids.includes("m2")));
    // Each piece of the text opens with its citation's marker: [1], [2], ... in the order of the citations.
    assert.deepEqual(context.citations.map((c) => c.marker), context.citations.map((_c, i) => `[${i + 1}]`));
    assert.deepEqual([...context.text.matchAll(/^(\[\d+\]) /gm)].map((m) => m[1]), context.citations.map((c) => c.marker));
  });

  test("a long reply is cited as an excerpt with its span, and getMessage returns it whole", async () => {
    const steps = Array.from({ length: 30 }, (_v, n) => `Step ${n}: review the backlog and estimate the tasks.`);
    steps.splice(17, 0, "Your first sprint ends on March 29, two days before the investor demo.");
    const reply = steps.join("\n\n");
    const own = newGroup("excerpts");
    await memory.addMessages(own, "chat-3", [
      { id: "plan", role: "assistant", content: reply, timestamp: "2023-07-01T09:00:00Z" },
    ]);
    await memory.flush(own, "chat-3");
    const context = await memory.context(own, { query: "When does my first sprint end?", token_budget: 300 });
    const excerpts = context.citations.flatMap((c) => c.excerpts);
    const excerpt = excerpts.find((e) => e.message_id === "plan");
    assert.ok(excerpt, JSON.stringify(context));
    // Spans count code points; this reply is ASCII, so string indices are the same.
    assert.match(reply.slice(excerpt.start, excerpt.end), /March 29/);
    assert.match(context.text, /assistant \(excerpt\): … /);
    const whole = await memory.getMessage(own, "chat-3", "plan");
    assert.equal(whole.content, reply);
    await memory.deleteGroup(own);
  });

  test("timeline pages in time order with the cursor", async () => {
    const first = await memory.timeline(group, { limit: 1 });
    assert.equal(first.episodes.length, 1);
    assert.ok(first.next_cursor);
    const second = await memory.timeline(group, { limit: 1, cursor: first.next_cursor });
    assert.equal(second.episodes.length, 1);
    assert.ok(first.episodes[0]!.timestamp < second.episodes[0]!.timestamp);
    const newest = await memory.timeline(group, { order: "desc", session_id: "chat-2" });
    assert.ok(newest.episodes.every((e) => e.session_id === "chat-2"));
    const before = await memory.timeline(group, { end: "2023-06-01T00:00:00Z" });
    assert.deepEqual([...new Set(before.episodes.map((e) => e.session_id))], ["chat-1"]);
  });

  test("the timeline shows what was just said, as its session's open episode", async () => {
    const live = newGroup("live");
    await memory.addMessages(live, "chat", [{ id: "p1", content: "We are driving to the lake with Rex." }]);
    const page = await memory.timeline(live);
    assert.equal(page.episodes.length, 1);
    assert.equal(page.episodes[0]!.boundary_reason, "open");
    assert.deepEqual(page.pending, [page.episodes[0]!.uuid]);
    await memory.flush(live, "chat");
    const formed = await memory.timeline(live);
    assert.deepEqual(formed.pending, []);
    assert.deepEqual(formed.episodes[0]!.source_message_ids, ["p1"]);
    await memory.deleteGroup(live);
  });

  test("history pages the messages", async () => {
    const page = await memory.history(group, "chat-1", { limit: 1 });
    assert.deepEqual(page.messages.map((m) => m.id), ["m1"]);
    assert.equal(typeof page.next_cursor, "string");
    const last = await memory.history(group, "chat-1", { limit: 1, cursor: page.next_cursor! });
    assert.equal(last.messages[0]!.content, CHAT[1]!.content);
    assert.equal(last.next_cursor, null);
    await assert.rejects(memory.history(group, "chat-1", { cursor: "not a cursor" }), /invalid history cursor/);
  });

  test("sessions and groups: metadata, listing, deletion", async () => {
    const info = await memory.putSession(group, "chat-1", { title: "Dogs", user_ids: ["caroline"] });
    assert.equal(info.title, "Dogs");
    assert.equal((await memory.getSession(group, "chat-1")).title, "Dogs");
    const config = await memory.putGroup(group, { description: "a test group" });
    assert.equal((await memory.getGroup(group)).description, config.description);
    const sessions = await memory.listSessions(group);
    assert.deepEqual(sessions.map((s) => s.session_id).sort(), ["chat-1", "chat-2"]);

    const receipt = await memory.deleteSession(group, "chat-2");
    assert.ok(receipt.messages.includes("n1"));
    assert.deepEqual((await memory.listSessions(group)).map((s) => s.session_id), ["chat-1"]);
    assert.deepEqual((await memory.history(group, "chat-2")).messages, []);
  });

  test("ids are encoded as one path segment", async () => {
    const odd = "a session? #1 ..";
    await memory.addMessages(group, odd, [{ id: "x/y?", content: "An id with odd characters." }]);
    assert.deepEqual((await memory.history(group, odd)).messages.map((m) => m.id), ["x/y?"]);
    await memory.deleteSession(group, odd);
  });

  test("a group's deletion leaves nothing to read", async () => {
    const other = newGroup("gone");
    await memory.addMessages(other, "s", CHAT);
    await memory.flush(other, "s");
    const receipt = await memory.deleteGroup(other);
    assert.ok(receipt.collections.length >= 1 && receipt.vectors >= 1);
    assert.deepEqual(await memory.search(other, "dog"), []);
    assert.deepEqual(await memory.listSessions(other), []);
  });
});

test("groups are isolated: nothing of one group is read from another", async () => {
  const a = newGroup("iso-a");
  const b = newGroup("iso-b");
  try {
    await memory.addMessages(a, "same-session", CHAT);
    await memory.flush(a, "same-session");
    await memory.addMessages(b, "same-session", LATER);
    await memory.flush(b, "same-session");
    for (const [mine, theirs] of [[a, "Rex"], [b, "sourdough"]] as const) {
      const hits = await memory.search(mine, { query: "dog Rex hiking sourdough bread", k: 50, expand: true });
      assert.ok(hits.every((hit) => hit.episode.group_id === mine));
      const timeline = await memory.timeline(mine);
      assert.ok(timeline.episodes.every((e) => e.group_id === mine));
      const context = await memory.context(mine, "dog Rex hiking sourdough bread");
      const history = await memory.history(mine, "same-session");
      const seen = JSON.stringify([hits, timeline, context, history]);
      assert.ok(seen.includes(theirs), `${mine} should see its own ${theirs}`);
      assert.ok(!seen.includes(theirs === "Rex" ? "sourdough" : "Rex"), `${mine} sees the other group`);
    }
  } finally {
    await memory.deleteGroup(a);
    await memory.deleteGroup(b);
  }
});
