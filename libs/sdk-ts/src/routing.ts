/**
 * Rerouting: the running attempts and unacknowledged results of a dispatcher whose stream is down
 * go out through another, connected dispatcher stream of the same worker. An attempt is owned by
 * the worker identity that accepted it, not by the dispatcher that delivered it: any dispatcher of
 * the region accepts its heartbeats, checkpoints and result. So a dispatcher crash costs no work a
 * healthy worker finishes.
 *
 * Policy (as the Python SDK): an attempt moves only when its session is down, to the connected
 * session holding the fewest attempts, and is not moved back. A moved attempt's credit belongs to
 * the stream that delivered it, so finishing it returns no credit to the session that carries it.
 * Queued (unstarted) attempts stay: they belong to the stream that delivered them.
 */
import type { DispatcherSession } from "./session";

function hasWork(s: DispatcherSession): boolean {
  if (s.protocol.results.size) return true;
  for (const a of s.attempts.values()) if (a.state === "running") return true;
  return false;
}

/** Moves the work of every down session to a live one; returns how many attempts/results moved. */
export function reroute(sessions: Iterable<DispatcherSession>): number {
  const all = [...sessions];
  const live = all.filter((s) => s.connected && !s.ended && !s.closing);
  if (!live.length) return 0;
  let moved = 0;
  for (const src of all) {
    if (src.connected || src.closing || src.ended || !hasWork(src)) continue;
    const dst = live.reduce((a, b) => (b.attempts.size < a.attempts.size ? b : a));
    moved += move(src, dst);
  }
  return moved;
}

/** Moves every running attempt (with its pending accept) and every pending result of `src` to `dst`. */
export function move(src: DispatcherSession, dst: DispatcherSession): number {
  let moved = 0;
  for (const [key, att] of [...src.attempts]) {
    if (att.state !== "running") continue;
    src.attempts.delete(key);
    dst.adopt(att);
    moveAccept(src, dst, key);
    moved++;
  }
  for (const [key, result] of [...src.protocol.results]) {
    src.protocol.results.delete(key);
    src.buffer.discard(key);
    moveAccept(src, dst, key);
    dst.protocol.finish(key, result);
    dst.buffer.addResult(result);
    moved++;
  }
  return moved;
}

function moveAccept(src: DispatcherSession, dst: DispatcherSession, key: string): void {
  const ref = src.protocol.accepts.get(key);
  if (ref === undefined) return;
  src.protocol.accepts.delete(key);
  dst.protocol.accept(key, ref);
  dst.buffer.addAccept(ref);
}
