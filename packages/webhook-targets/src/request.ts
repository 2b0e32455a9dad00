/**
 * The request every outgoing webhook is: a vote's delivery attempt (the dispatcher) and a test
 * event (vote-ingest) send the same headers around their own payload. The body is serialised once,
 * and those bytes are both signed and sent, so the signature always matches what the receiver reads
 * off the wire. Besides the spec's headers it carries the Standard Webhooks headers (webhook-id =
 * the delivery id, webhook-timestamp, webhook-signature under the current secret and, during a
 * rotation's overlap, the previous one); Authorization and X-Webhook-Signature-256 always use the
 * current secret.
 */
import { WEBHOOK_HEADERS, WEBHOOK_USER_AGENT } from "@botdir/schema";
import { sign, standardHeaders } from "@botdir/signing";

export interface WebhookSigning {
  /** X-Webhook-Delivery and webhook-id: what receivers de-duplicate on. */
  id: string;
  /** The webhook secret in clear: sent verbatim as Authorization and used as the HMAC key. */
  secret: string;
  /** The secret before a rotation, during its overlap: it signs `webhook-signature` too. */
  previousSecret: string | null;
  /** webhook-timestamp. */
  signedAt: Date;
  /**
   * X-Webhook-Trace: the trace id the request belongs to (32 lowercase hex), which owners quote to
   * support. Only the id: a full `traceparent` would let the receiver's own tracing join our trace
   * and sampling decision. Left out when absent or not a trace id. Not signed.
   */
  traceId?: string | null;
}

const TRACE_ID = /^[0-9a-f]{32}$/;
const INVALID_TRACE_ID = "0".repeat(32);

/** The body and headers of a webhook request carrying `payload` (whose `event` is X-Webhook-Event). */
export function signedWebhookRequest(
  payload: { event: string },
  signing: WebhookSigning,
): { body: Buffer; headers: Record<string, string> } {
  const { id, secret, previousSecret, signedAt, traceId } = signing;
  const body = Buffer.from(JSON.stringify(payload), "utf8");
  const headers: Record<string, string> = {
    "Content-Type": "application/json",
    "User-Agent": WEBHOOK_USER_AGENT,
    Authorization: secret,
    [WEBHOOK_HEADERS.event]: payload.event,
    [WEBHOOK_HEADERS.delivery]: id,
    [WEBHOOK_HEADERS.signature]: sign(secret, body),
    ...standardHeaders(previousSecret ? [secret, previousSecret] : [secret], id, signedAt, body),
  };
  // Set on the object made above, not spread into it: one object per request, not two.
  if (traceId && traceId !== INVALID_TRACE_ID && TRACE_ID.test(traceId))
    headers[WEBHOOK_HEADERS.trace] = traceId;
  return { body, headers };
}
