// A group streamed out as JSON Lines and imported into another group holds the same memory.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { CHAT, LATER, client, collect, newGroup } from "./helpers.js";

const memory = client();
const source = newGroup("export");
const copy = newGroup("import");
after(async () => {
  await memory.deleteGroup(source);
  await memory.deleteGroup(copy);
});

test("streamed export -> import round trip", async () => {
  await memory.addMessages(source, "chat-1", CHAT);
  await memory.addMessages(source, "chat-2", LATER);
  await memory.flush(source, "chat-1");
  await memory.flush(source, "chat-2");

  const lines = await collect(memory.exportGroup(source));
  assert.ok(lines.length >= 6, `only ${lines.length} lines`);
  for (const line of lines) assert.equal(typeof JSON.parse(line), "object"); // whole lines, no newline

  const receipt = await memory.importGroup(copy, memory.exportGroup(source)); // streamed straight across
  assert.equal(receipt.group_id, copy);
  assert.equal(receipt.source_group_id, source);
  assert.equal(receipt.messages, 4);
  assert.ok(receipt.episodes >= 2);

  const titles = async (group: string) => (await memory.timeline(group)).episodes.map((e) => [e.title, e.content]);
  assert.deepEqual(await titles(copy), await titles(source));
  const hits = await memory.search(copy, "sourdough");
  assert.equal(hits[0]!.episode.group_id, copy);
  assert.deepEqual((await memory.history(copy, "chat-1")).messages.map((m) => m.content), CHAT.map((m) => m.content));

  const again = await memory.importGroup(copy, lines); // idempotent
  assert.deepEqual((await memory.listSessions(copy)).map((s) => s.session_id).sort(), ["chat-1", "chat-2"]);
  assert.equal((await memory.timeline(copy)).episodes.length, (await memory.timeline(source)).episodes.length);
  assert.equal(again.group_id, copy);
});

test("an export read only in part lets go of its connection", async () => {
  for (let i = 0; i < 3; i++) {
    for await (const line of memory.exportGroup(source)) {
      assert.equal(typeof JSON.parse(line), "object");
      break;
    }
  }
  assert.ok((await collect(memory.exportGroup(source))).length >= 6);
});
