// Names for the generated types (src/schema.ts): the HTTP API's own shapes and field names.
import type { components, operations } from "./schema.js";

type Schemas = components["schemas"];

/** An answer's shape. The schema leaves a field with a server-side default optional (right for requests:
 * `npm run generate` uses `defaultNonNullable: false`), but epimem's answers always hold every field, so in
 * answers none is optional (a nullable one stays `| null`). */
export type Answer<T> = T extends (infer E)[] ? Answer<E>[] : T extends object ? { [K in keyof T]-?: Answer<T[K]> } : T;

export type Message = Answer<Schemas["Message"]>;
/** A message to add: `id` and `content` are required; `role` (user), `timestamp` (now), the rest optional. */
export type MessageIn = Schemas["Message"];
export type Episode = Answer<Schemas["Episode"]>;
export type AddReceipt = Answer<Schemas["AddReceipt"]>;
export type EpisodeOut = Answer<Schemas["EpisodeOut"]>;
export type HistoryOut = Answer<Schemas["HistoryOut"]>;
export type SearchQuery = Schemas["SearchQuery"];
export type SearchHit = Answer<Schemas["SearchHit"]>;
export type ScoreComponents = Answer<Schemas["ScoreComponents"]>;
export type ContextQuery = Schemas["ContextQuery"];
export type ContextResult = Answer<Schemas["ContextResult"]>;
export type Citation = Answer<Schemas["Citation"]>;
/** A message a citation holds in part: its id and the span of its content (`start`, `end`: code points). */
export type Excerpt = Answer<Schemas["Excerpt"]>;
export type TimelinePage = Answer<Schemas["TimelinePage"]>;
export type SessionInfo = Answer<Schemas["SessionInfo"]>;
export type SessionInfoIn = Schemas["SessionInfoIn"];
export type GroupConfiguration = Answer<Schemas["GroupConfiguration"]>;
export type GroupConfigurationIn = Schemas["GroupConfigurationIn"];
export type SummariesIn = Schemas["SummariesIn"];
export type DeletionReceipt = Answer<Schemas["DeletionReceipt"]>;
export type ImportReceipt = Answer<Schemas["ImportReceipt"]>;
/** The one error body of every non-2xx answer. */
export type ErrorBody = Answer<Schemas["ErrorBody"]>;
/** The query parameters of `GET /v1/groups/{group_id}/timeline`: `session_id`, `start`, `end`, `limit`, `cursor`,
 * `order`. */
export type TimelineParams = NonNullable<operations["timeline_v1_groups__group_id__timeline_get"]["parameters"]["query"]>;
