import { EpimemError, INVALID_RESPONSE, NETWORK_ERROR, TIMEOUT, errorFromResponse, parseJson } from "./errors.js";
import type {
  AddReceipt,
  ContextQuery,
  ContextResult,
  DeletionReceipt,
  EpisodeOut,
  Episode,
  GroupConfiguration,
  GroupConfigurationIn,
  HistoryOut,
  ImportReceipt,
  Message,
  MessageIn,
  SearchHit,
  SearchQuery,
  SessionInfo,
  SessionInfoIn,
  SummariesIn,
  TimelinePage,
  TimelineParams,
} from "./types.js";

export interface RetryOptions {
  /** Further tries after the first one (default 3). */
  retries?: number;
  /** The longest wait between two tries, whatever `Retry-After` says (default 30,000 ms). */
  maxDelayMs?: number;
}

export interface EpimemClientOptions {
  /** Where epimem answers, e.g. `http://127.0.0.1:8000` (the `/v1` prefix is added by the client). */
  baseUrl: string;
  /** An API key from the server's `EPIMEM_API_KEYS_FILE`; none in local mode. */
  apiKey?: string;
  /** The `fetch` to send with (default: the global one): a runtime's own, or one with a proxy agent. */
  fetch?: typeof globalThis.fetch;
  /** Per try: until the whole answer is read, or for `exportGroup` until the answer starts (default 120,000). */
  timeoutMs?: number;
  /** Opt-in: retry a 503 (store unavailable) after the seconds of its `Retry-After`. Off by default. */
  retry?: boolean | RetryOptions;
}

interface Request {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  query?: Record<string, string | number | boolean | undefined | null>;
  json?: unknown;
  body?: string;
  contentType?: string;
}

/** An answer, and its text when it was read. */
interface Answer {
  response: Response;
  text?: string;
}

const DEFAULT_TIMEOUT_MS = 120_000;
const DEFAULT_RETRY_AFTER_S = 5;

/** One URL path segment, as api/http_calls.py's `path_segment`: ids with '/' cannot be addressed, and '.' / '..'
 * are encoded so that no URL normalisation turns them into another path. */
export function pathSegment(value: string): string {
  if (value.includes("/")) {
    throw new EpimemError(0, "invalid_input", "ids containing '/' cannot be addressed over HTTP");
  }
  if (value.length > 0 && /^\.+$/.test(value)) return "%2E".repeat(value.length);
  return encodeURIComponent(value);
}

function groupPath(group: string): string {
  return `/v1/groups/${pathSegment(group)}`;
}

function sessionPath(group: string, session: string): string {
  return `${groupPath(group)}/sessions/${pathSegment(session)}`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A client of an epimem server over `fetch` (Node >= 20, browsers, edge runtimes). Field names are the HTTP
 * API's own (`session_ids`, `token_budget`, ...); every failure throws `EpimemError`, as a rejected promise
 * (every call is `async`, also where an id is refused before sending). */
export class EpimemClient {
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  readonly #fetch: typeof globalThis.fetch;
  readonly #timeoutMs: number;
  readonly #retry: Required<RetryOptions> | undefined;

  constructor(options: EpimemClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey;
    const fetcher = options.fetch ?? globalThis.fetch;
    this.#fetch = (input, init) => fetcher(input, init); // called unbound: some runtimes' fetch needs its `this`
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const retry = options.retry === true ? {} : options.retry || undefined;
    this.#retry = retry && { retries: retry.retries ?? 3, maxDelayMs: retry.maxDelayMs ?? 30_000 };
  }

  // -- messages and episodes ------------------------------------------------------------------------

  /** Stores the messages durably (idempotent by message id) → `{accepted, duplicates, pending}`. */
  async addMessages(group: string, session: string, messages: MessageIn[]): Promise<AddReceipt> {
    return this.#json({ method: "POST", path: `${sessionPath(group, session)}/messages`, json: { messages } });
  }

  /** Forms episodes from every pending message of the session; resolves once they are stored and searchable. */
  async flush(group: string, session: string): Promise<Episode[]> {
    const out = await this.#json<{ episodes: Episode[] }>({ method: "POST", path: `${sessionPath(group, session)}/flush` });
    return out.episodes;
  }

  /** The session's messages in event-time order, one page → `{messages, next_cursor}`; pass `next_cursor` back as `cursor`. */
  async history(group: string, session: string, page: { limit?: number; cursor?: string } = {}): Promise<HistoryOut> {
    return this.#json({ method: "GET", path: `${sessionPath(group, session)}/messages`, query: page });
  }

  /** One message as stored, whole: what a citation's excerpt (a span of its content) was cut from. */
  async getMessage(group: string, session: string, messageId: string): Promise<Message> {
    const path = `${sessionPath(group, session)}/messages/${pathSegment(messageId)}`;
    return (await this.#json<{ message: Message }>({ method: "GET", path })).message;
  }

  /** One episode → `{episode, messages}`; `messages` (its source messages) only with `expand: true`. */
  async getEpisode(group: string, session: string, episodeId: string, options: { expand?: boolean } = {}): Promise<EpisodeOut> {
    const path = `${sessionPath(group, session)}/episodes/${pathSegment(episodeId)}`;
    return this.#json({ method: "GET", path, query: { expand: options.expand ? "messages" : undefined } });
  }

  async deleteMessage(group: string, session: string, messageId: string): Promise<DeletionReceipt> {
    return this.#json({ method: "DELETE", path: `${sessionPath(group, session)}/messages/${pathSegment(messageId)}` });
  }

  async deleteEpisode(group: string, session: string, episodeId: string): Promise<DeletionReceipt> {
    return this.#json({ method: "DELETE", path: `${sessionPath(group, session)}/episodes/${pathSegment(episodeId)}` });
  }

  // -- recall ---------------------------------------------------------------------------------------

  /** Hits best first (or in time order with `order: "chronological"`). A string is `{ query }`. */
  async search(group: string, query: string | SearchQuery): Promise<SearchHit[]> {
    const json = typeof query === "string" ? { query } : query;
    const out = await this.#json<{ hits: SearchHit[] }>({ method: "POST", path: `${groupPath(group)}/search`, json });
    return out.hits;
  }

  /** A token-budgeted, cited context block for a prompt → `{text, citations, tokens}`. A string is `{ query }`. */
  async context(group: string, query: string | ContextQuery): Promise<ContextResult> {
    const json = typeof query === "string" ? { query } : query;
    return this.#json({ method: "POST", path: `${groupPath(group)}/context`, json });
  }

  /** Episodes in time order, one page → `{episodes, next_cursor}`; pass `next_cursor` back as `cursor`. */
  async timeline(group: string, params: TimelineParams = {}): Promise<TimelinePage> {
    return this.#json({ method: "GET", path: `${groupPath(group)}/timeline`, query: params });
  }

  // -- groups and sessions --------------------------------------------------------------------------

  async putGroup(group: string, config: GroupConfigurationIn = {}): Promise<GroupConfiguration> {
    return this.#json({ method: "PUT", path: groupPath(group), json: config });
  }

  async getGroup(group: string): Promise<GroupConfiguration> {
    return this.#json({ method: "GET", path: groupPath(group) });
  }

  /** Deletes the group and everything in it. */
  async deleteGroup(group: string): Promise<DeletionReceipt> {
    return this.#json({ method: "DELETE", path: groupPath(group) });
  }

  /** The sessions of a group, oldest first. */
  async listSessions(group: string): Promise<SessionInfo[]> {
    const out = await this.#json<{ sessions: SessionInfo[] }>({ method: "GET", path: `${groupPath(group)}/sessions` });
    return out.sessions;
  }

  async putSession(group: string, session: string, info: SessionInfoIn = {}): Promise<SessionInfo> {
    return this.#json({ method: "PUT", path: sessionPath(group, session), json: info });
  }

  async getSession(group: string, session: string): Promise<SessionInfo> {
    return this.#json({ method: "GET", path: sessionPath(group, session) });
  }

  /** Deletes the session and everything in it. */
  async deleteSession(group: string, session: string): Promise<DeletionReceipt> {
    return this.#json({ method: "DELETE", path: sessionPath(group, session) });
  }

  // -- summaries, export, import --------------------------------------------------------------------

  /** Summarises the episodes of the last `days_back` days into summary episodes linked to every source. */
  async generateSummaries(group: string, options: SummariesIn = {}): Promise<Episode[]> {
    const path = `${groupPath(group)}/summaries`;
    return (await this.#json<{ episodes: Episode[] }>({ method: "POST", path, json: options })).episodes;
  }

  /** The group as JSON Lines, one line (without its newline) at a time, read as the server streams them. */
  async *exportGroup(group: string, options: { include_embeddings?: boolean } = {}): AsyncGenerator<string> {
    const query = { include_embeddings: options.include_embeddings ?? false };
    const { response } = await this.#send({ method: "GET", path: `${groupPath(group)}/export`, query }, true);
    if (!response.body) throw new EpimemError(response.status, INVALID_RESPONSE, "the export answer has no body");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      let rest = "";
      for (;;) {
        const { done, value } = await reader.read().catch((error: unknown) => {
          throw new EpimemError(0, NETWORK_ERROR, `the export stream broke off: ${String(error)}`, { cause: error });
        });
        if (done) break;
        const lines = (rest + value).split("\n");
        rest = lines.pop() ?? "";
        yield* lines.filter((line) => line.trim() !== "");
      }
      if (rest.trim() !== "") yield rest;
    } finally {
      await reader.cancel(); // a caller that stops early lets the connection go
    }
  }

  /** Imports JSON Lines written by `exportGroup` (from any group) into `group`; idempotent. */
  async importGroup(group: string, lines: Iterable<string> | AsyncIterable<string>): Promise<ImportReceipt> {
    const parts: string[] = [];
    for await (const line of lines) parts.push(line.endsWith("\n") ? line : `${line}\n`);
    const path = `${groupPath(group)}/import`;
    return this.#json({ method: "POST", path, body: parts.join(""), contentType: "application/x-ndjson" });
  }

  // -- operations -----------------------------------------------------------------------------------

  /** Whether the server answers `/readyz` with 200 (store reachable, model loaded). */
  async ready(): Promise<boolean> {
    try {
      return (await this.#send({ method: "GET", path: "/readyz" }, false)).response.ok;
    } catch (error) {
      if (error instanceof EpimemError) return false;
      throw error;
    }
  }

  // -- sending --------------------------------------------------------------------------------------

  async #json<T>(request: Request): Promise<T> {
    const { response, text } = await this.#send(request, false);
    const body = parseJson(text ?? "");
    if (body === undefined) {
      throw new EpimemError(response.status, INVALID_RESPONSE, `expected JSON, got: ${(text ?? "").slice(0, 200)}`);
    }
    return body as T;
  }

  /** The answer of a 2xx (with its text, read within the timeout, unless `streamed`); any other throws. */
  async #send(request: Request, streamed: boolean): Promise<Answer> {
    for (let attempt = 0; ; attempt++) {
      const answer = await this.#try(request, streamed);
      if (answer.response.ok) return answer;
      const error = errorFromResponse(answer.response, answer.text ?? "");
      const retry = this.#retry;
      if (!retry || answer.response.status !== 503 || attempt >= retry.retries) throw error;
      await sleep(Math.min((error.retryAfter ?? DEFAULT_RETRY_AFTER_S) * 1000, retry.maxDelayMs));
    }
  }

  /** One try. The timeout covers the whole answer; with `streamed`, a 2xx answer's body is left to the caller. */
  async #try(request: Request, streamed: boolean): Promise<Answer> {
    const url = new URL(this.baseUrl + request.path);
    for (const [name, value] of Object.entries(request.query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = {};
    if (this.#apiKey) headers.authorization = `Bearer ${this.#apiKey}`;
    let body: string | undefined = request.body;
    if (request.json !== undefined) body = JSON.stringify(request.json);
    if (body !== undefined) headers["content-type"] = request.contentType ?? "application/json";

    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.#timeoutMs);
    try {
      const response = await this.#fetch(url, { method: request.method, headers, body, signal: controller.signal });
      if (streamed && response.ok) return { response };
      return { response, text: await response.text() };
    } catch (error) {
      const where = `${request.method} ${request.path}`;
      if (controller.signal.aborted) {
        throw new EpimemError(0, TIMEOUT, `${where}: no answer within ${this.#timeoutMs} ms`, { cause: error });
      }
      throw new EpimemError(0, NETWORK_ERROR, `${where}: ${String(error)}`, { cause: error });
    } finally {
      clearTimeout(timer);
    }
  }
}
