/**
 * A tiny authoritative DNS server on loopback UDP, for tests of the resolver and of the dispatcher
 * (as a real process, via WEBHOOK_DNS_SERVERS): names answer the configured addresses, unknown
 * names NXDOMAIN, and names it is told to ignore never get an answer (a nameserver that drops
 * queries). It speaks just enough DNS for A and AAAA questions.
 */
import { createSocket } from "node:dgram";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";

type IpaddrModule = typeof import("ipaddr.js");
const ipaddr = createRequire(import.meta.url)("ipaddr.js") as IpaddrModule;

/** What a name answers: its addresses (v4 and v6 mixed), or `drop` for no answer at all. */
export type ZoneEntry = string[] | "drop";

export interface DnsTestServer {
  /** `127.0.0.1:<port>`, for WEBHOOK_DNS_SERVERS or createDnsResolver({servers}). */
  address: string;
  /** Questions received so far, as `<name> <A|AAAA>`. */
  queries: string[];
  close(): Promise<void>;
}

const TYPE_A = 1;
const TYPE_AAAA = 28;

/**
 * Starts the server. `zone(name)` (name lowercased, without the trailing dot) says what a name
 * answers; undefined is NXDOMAIN.
 */
export async function startDnsServer(zone: (name: string) => ZoneEntry | undefined): Promise<DnsTestServer> {
  const socket = createSocket("udp4");
  const queries: string[] = [];
  socket.on("message", (msg, peer) => {
    const question = parseQuestion(msg);
    if (!question) return;
    const { name, type, end } = question;
    queries.push(`${name} ${type === TYPE_AAAA ? "AAAA" : type === TYPE_A ? "A" : type}`);
    const entry = zone(name);
    if (entry === "drop") return;
    const family = type === TYPE_A ? 4 : type === TYPE_AAAA ? 6 : 0;
    const answers =
      entry === undefined
        ? []
        : entry.filter((a) => ipaddr.isValid(a) && ipaddr.parse(a).kind() === `ipv${family}`);
    socket.send(reply(msg, end, entry === undefined, type, answers), peer.port, peer.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  const { port } = socket.address() as AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    queries,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

function parseQuestion(msg: Buffer): { name: string; type: number; end: number } | null {
  if (msg.length < 12 || msg.readUInt16BE(4) < 1) return null;
  const labels: string[] = [];
  let at = 12;
  for (;;) {
    const length = msg[at];
    if (length === undefined || length > 63) return null;
    at++;
    if (length === 0) break;
    labels.push(msg.subarray(at, at + length).toString("latin1"));
    at += length;
  }
  if (at + 4 > msg.length) return null;
  return { name: labels.join(".").toLowerCase(), type: msg.readUInt16BE(at), end: at + 4 };
}

function reply(
  query: Buffer,
  questionEnd: number,
  nxdomain: boolean,
  type: number,
  answers: string[],
): Buffer {
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  const rd = (query[2] ?? 0) & 0x01;
  header.writeUInt16BE(0x8400 | (rd << 8) | (nxdomain ? 3 : 0), 2); // response, authoritative, rcode
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(answers.length, 6);
  const records = answers.map((address) => {
    const rdata = Buffer.from(ipaddr.parse(address).toByteArray());
    const record = Buffer.alloc(12 + rdata.length);
    record.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
    record.writeUInt16BE(type, 2);
    record.writeUInt16BE(1, 4); // class IN
    record.writeUInt32BE(5, 6); // TTL
    record.writeUInt16BE(rdata.length, 10);
    rdata.copy(record, 12);
    return record;
  });
  return Buffer.concat([header, query.subarray(12, questionEnd), ...records]);
}
