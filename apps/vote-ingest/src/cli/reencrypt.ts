/**
 * `botctl secrets reencrypt`: re-encrypts every stored webhook secret — the current one and, during
 * a rotation's overlap, the previous one — under the first key of the ring, so the older keys can
 * be removed. Walks `bots` in id order, a batch at a time; a value
 * already `v2` under the first key is left alone (idempotent, safe to run again or concurrently
 * with edits: each row is written only if it still holds the value that was read).
 */
import { type Db, type SecretBox, SecretUnreadable } from "@botdir/db";

export interface ReencryptSummary {
  reencrypted: number;
  alreadyCurrent: number;
  /** Secrets no key of the ring decrypts (left as they are; each is named on stderr). */
  unreadable: number;
}

export interface ReencryptOptions {
  batchSize?: number;
  /** One line of progress (stderr in the CLI). */
  progress?: (line: string) => void;
}

export async function reencryptSecrets(
  db: Db,
  box: SecretBox,
  options: ReencryptOptions = {},
): Promise<ReencryptSummary> {
  const batchSize = options.batchSize ?? 500;
  const progress = options.progress ?? (() => {});
  const summary: ReencryptSummary = { reencrypted: 0, alreadyCurrent: 0, unreadable: 0 };
  for (const column of SECRET_COLUMNS) {
    await reencryptColumn(db, box, column, batchSize, progress, summary);
  }
  return summary;
}

/** Every column holding a secret sealed by the box (the previous one signs during an overlap). */
const SECRET_COLUMNS = ["webhook_secret_encrypted", "webhook_previous_secret_encrypted"] as const;

async function reencryptColumn(
  db: Db,
  box: SecretBox,
  column: (typeof SECRET_COLUMNS)[number],
  batchSize: number,
  progress: (line: string) => void,
  summary: ReencryptSummary,
): Promise<void> {
  let after = "";
  let scanned = 0;
  for (;;) {
    const { rows } = await db.pool.query<{ id: string; stored: string }>(
      `SELECT id, ${column} AS stored FROM bots
        WHERE ${column} IS NOT NULL AND id > $1
        ORDER BY id LIMIT $2`,
      [after, batchSize],
    );
    if (rows.length === 0) break;
    after = rows[rows.length - 1]?.id ?? after;
    const ids: string[] = [];
    const olds: string[] = [];
    const news: string[] = [];
    for (const row of rows) {
      if (box.isCurrent(row.stored)) {
        summary.alreadyCurrent++;
        continue;
      }
      try {
        const plain = box.decrypt(row.stored);
        ids.push(row.id);
        olds.push(row.stored);
        news.push(box.encrypt(plain));
      } catch (error) {
        if (!(error instanceof SecretUnreadable)) throw error;
        summary.unreadable++;
        progress(
          `bot ${row.id}: no configured key decrypts its ${column === "webhook_secret_encrypted" ? "secret" : "previous secret"} (key id ${error.keyId ?? "none"})`,
        );
      }
    }
    if (ids.length > 0) {
      // Compare-and-set: a secret replaced meanwhile (webhook set) is already under a current key.
      const result = await db.pool.query(
        `UPDATE bots AS b SET ${column} = v.new
           FROM unnest($1::text[], $2::text[], $3::text[]) AS v(id, old, new)
          WHERE b.id = v.id AND b.${column} = v.old`,
        [ids, olds, news],
      );
      summary.reencrypted += result.rowCount ?? 0;
    }
    scanned += rows.length;
    progress(
      `${column}: scanned ${scanned}; ${summary.reencrypted} re-encrypted, ${summary.alreadyCurrent} already under key ${box.currentKeyId}`,
    );
  }
}
