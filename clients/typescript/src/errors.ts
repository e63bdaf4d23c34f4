/** Every failure of a call: a non-2xx answer (with epimem's `{"error": {"code", "message", "details"}}`),
 * a network failure (`network_error`), a timeout (`timeout`), or an answer that is not what epimem sends
 * (`invalid_response`). `status` is 0 when no HTTP answer came. */
export class EpimemError extends Error {
  override readonly name = "EpimemError";
  readonly status: number;
  readonly code: string;
  readonly details: unknown;
  /** Seconds from the `Retry-After` header (a 503 while the store is unavailable), when there is one. */
  readonly retryAfter: number | undefined;

  constructor(
    status: number,
    code: string,
    message: string,
    options: { details?: unknown; retryAfter?: number; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = status;
    this.code = code;
    this.details = options.details ?? null;
    this.retryAfter = options.retryAfter;
  }
}

/** Codes of failures that have no HTTP answer. */
export const NETWORK_ERROR = "network_error";
export const TIMEOUT = "timeout";
export const INVALID_RESPONSE = "invalid_response";

function retryAfterSeconds(response: Response): number | undefined {
  const value = response.headers.get("retry-after");
  if (value === null) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds;
  const date = Date.parse(value); // the HTTP-date form
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000);
}

/** The parsed JSON, or `undefined` for text that is not JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    if (error instanceof SyntaxError) return undefined;
    throw error;
  }
}

/** The error of a non-2xx answer (its body's `text`), read from epimem's one error shape, or described plainly if
 * the body is something else (e.g. from a proxy in front of epimem). */
export function errorFromResponse(response: Response, text: string): EpimemError {
  const retryAfter = retryAfterSeconds(response);
  const error = (parseJson(text) as { error?: { code?: unknown; message?: unknown; details?: unknown } } | null)
    ?.error;
  if (error && typeof error.code === "string" && typeof error.message === "string") {
    return new EpimemError(response.status, error.code, error.message, { details: error.details, retryAfter });
  }
  const message = `HTTP ${response.status}: ${text.slice(0, 200)}`;
  return new EpimemError(response.status, `http_${response.status}`, message, { retryAfter });
}
