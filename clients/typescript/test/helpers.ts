import { randomUUID } from "node:crypto";
import { EpimemClient, type EpimemClientOptions, type MessageIn } from "epimem-client";

export const URL_ = process.env.EPIMEM_URL ?? "";
if (!URL_) throw new Error("EPIMEM_URL is not set: run the tests with `npm test` (it starts a server)");
/** A key for every group on a server with keys; none in local mode. */
export const ADMIN_KEY = process.env.EPIMEM_API_KEY || undefined;

export function client(options: Partial<EpimemClientOptions> = {}): EpimemClient {
  return new EpimemClient({ baseUrl: URL_, apiKey: ADMIN_KEY, timeoutMs: 60_000, ...options });
}

/** A group of this test run only. */
export function newGroup(name: string): string {
  return `ts-${name}-${randomUUID().slice(0, 8)}`;
}

export const CHAT: MessageIn[] = [
  { id: "m1", producer_id: "Caroline", timestamp: "2023-05-08T13:56:00Z", content: "I adopted a dog called Rex yesterday." },
  { id: "m2", producer_id: "Melanie", timestamp: "2023-05-08T13:57:00Z", content: "Lovely! Take Rex hiking at Lake Tahoe." },
];

export const LATER: MessageIn[] = [
  { id: "n1", producer_id: "Caroline", timestamp: "2023-06-20T09:00:00Z", content: "My sister bakes sourdough bread every Sunday." },
  { id: "n2", producer_id: "Melanie", timestamp: "2023-06-20T09:01:00Z", content: "Ask her for the starter recipe!" },
];

export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}
