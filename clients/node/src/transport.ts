// Calls to one lock service: Connect's protocol (binary protobuf) over
// HTTP/1.1 with kept-alive connections of the client's own agent, each call
// bounded in time, each failure turned into a DistlockError that says
// whether the call may have taken effect.

import * as http from "node:http";
import * as https from "node:https";
import type { Duplex } from "node:stream";

import { ConnectError, createClient, type CallOptions, type Client as ConnectClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

import { DistlockError, NoAnswer, Unavailable, fromConnect } from "./errors.js";
import { LockService } from "./gen/distlock/v1/lock_pb.js";

type Service = ConnectClient<typeof LockService>;

/** The unary methods of LockService, by their names in the client: "acquire", "renew", ... */
export type UnaryMethod = {
  [K in keyof Service]: ReturnType<Service[K]> extends Promise<unknown> ? K : never;
}[keyof Service];

/** A unary method's request: the message's fields, all optional. */
export type RequestOf<K extends UnaryMethod> = Parameters<Service[K]>[0];

/** A unary method's answer. */
export type ResponseOf<K extends UnaryMethod> = Awaited<ReturnType<Service[K]>>;

/** Options of a server stream. */
export interface StreamOptions {
  /**
   * Called when the answer's headers come: the stream is then open, and the
   * client's timeout bounds only the wait for them (not for a first message,
   * which a Watch sends only at the first change).
   */
  onHeader?: (header: Headers) => void;
  /** The stream does not keep the process running (its socket is unref'd). */
  background?: boolean;
}

/** Bounds of one call. */
export interface CallBounds {
  /** How long the call may take, in milliseconds; the client's timeout if unset. */
  timeoutMs?: number;
  /** Ends the call early; its reason is thrown. */
  signal?: AbortSignal;
}

// Node's codes of a connection that was never made: nothing was sent.
const notConnected = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL"]);

/** @internal Calls to one service, over the kept-alive connections of one agent. */
export class Rpc {
  readonly timeoutMs: number;
  readonly #svc: Service;
  readonly #agent: http.Agent;
  readonly #where: string;
  readonly #newService: (agent: http.Agent) => Service;
  #background: { svc: Service; agent: http.Agent } | undefined;

  constructor(url: string, token: string | undefined, timeoutMs: number) {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new TypeError(`service URL ${JSON.stringify(url)}: want http://host:port or https://host:port`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || !u.hostname) {
      throw new TypeError(`service URL ${JSON.stringify(url)}: want http://host:port or https://host:port`);
    }
    if (!(timeoutMs > 0) || !Number.isFinite(timeoutMs)) {
      throw new RangeError(`timeoutMs ${timeoutMs}: want a positive number of milliseconds`);
    }
    this.timeoutMs = timeoutMs;
    this.#where = u.host;
    // A kept-alive agent of the client's own: its sockets end with close().
    this.#agent = u.protocol === "https:" ? new https.Agent({ keepAlive: true }) : new http.Agent({ keepAlive: true });
    const auth: Interceptor = (next) => (req) => {
      if (token) req.header.set("Authorization", "Bearer " + token);
      return next(req);
    };
    this.#newService = (agent) =>
      createClient(
        LockService,
        createConnectTransport({
          baseUrl: url.replace(/\/+$/, ""),
          httpVersion: "1.1",
          nodeOptions: { agent },
          interceptors: [auth],
        }),
      );
    this.#svc = this.#newService(this.#agent);
  }

  /** The service over connections that do not keep the process running. */
  private background(): Service {
    if (!this.#background) {
      const agent = this.#agent instanceof https.Agent ? new UnrefHttpsAgent() : new UnrefHttpAgent();
      this.#background = { svc: this.#newService(agent), agent };
    }
    return this.#background.svc;
  }

  /** Makes one call within bounds and returns its answer, or throws a DistlockError. */
  async unary<K extends UnaryMethod>(method: K, req: RequestOf<K>, bounds: CallBounds = {}): Promise<ResponseOf<K>> {
    const timeoutMs = bounds.timeoutMs ?? this.timeoutMs;
    const ctl = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      ctl.abort();
    }, timeoutMs);
    const stop = link(bounds.signal, ctl);
    try {
      const fn = this.#svc[method] as unknown as (r: RequestOf<K>, o: CallOptions) => Promise<ResponseOf<K>>;
      return await fn(req, { signal: ctl.signal });
    } catch (e) {
      if (bounds.signal?.aborted && !timedOut) throw abortReason(bounds.signal);
      if (timedOut) throw new NoAnswer("unavailable", `${title(method)}: no answer from ${this.#where} within ${timeoutMs} ms`, { cause: e });
      throw this.error(method, e);
    } finally {
      clearTimeout(timer);
      stop();
    }
  }

  /**
   * Opens a server stream of method; the first answer (or with
   * options.onHeader, the answer's headers) must come within the client's
   * timeout (Observe sends an answer at once, Watch its headers). Ends
   * quietly when signal aborts; otherwise throws a DistlockError.
   */
  async *stream<M extends "observe" | "watch">(
    method: M,
    req: Parameters<Service[M]>[0],
    signal: AbortSignal,
    options: StreamOptions = {},
  ): AsyncGenerator<ReturnType<Service[M]> extends AsyncIterable<infer O> ? O : never> {
    const ctl = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      ctl.abort();
    }, this.timeoutMs);
    if (options.background) timer.unref();
    const stop = link(signal, ctl);
    try {
      const svc = options.background ? this.background() : this.#svc;
      const fn = svc[method] as unknown as (r: typeof req, o: CallOptions) => AsyncIterable<never>;
      const onHeader = options.onHeader
        ? (header: Headers) => {
            clearTimeout(timer);
            options.onHeader!(header);
          }
        : undefined;
      for await (const msg of fn(req, { signal: ctl.signal, onHeader })) {
        clearTimeout(timer);
        yield msg;
      }
    } catch (e) {
      if (signal.aborted && !timedOut) return;
      if (timedOut) throw new NoAnswer("unavailable", `${title(method)}: no answer from ${this.#where} within ${this.timeoutMs} ms`, { cause: e });
      throw this.error(method, e);
    } finally {
      clearTimeout(timer);
      stop();
      ctl.abort(); // a consumer that stopped early ends the call
    }
  }

  /** The DistlockError of a failed call. */
  error(method: string, e: unknown): DistlockError {
    if (e instanceof DistlockError) return e;
    const ce = ConnectError.from(e);
    const sys = systemCode(ce);
    if (sys !== undefined && notConnected.has(sys)) {
      return new Unavailable("unavailable", `${title(method)}: ${this.#where} refused the connection (${sys})`, { cause: e });
    }
    if (sys !== undefined) {
      // The connection broke after the call was sent: it may have taken effect.
      return new NoAnswer("unavailable", `${title(method)}: no answer from ${this.#where}: ${sys}`, { cause: e });
    }
    return fromConnect(ce);
  }

  /** Closes the connections. */
  close(): void {
    this.#agent.destroy();
    this.#background?.agent.destroy();
  }
}

// Agents whose connections do not keep the process running: a stream that
// only listens (the loss watch) must not, where the holds' timers do.
class UnrefHttpAgent extends http.Agent {
  override createConnection(options: http.ClientRequestArgs, cb?: (err: Error | null, s: Duplex) => void): Duplex | null | undefined {
    return unref(super.createConnection(options, cb));
  }
}

class UnrefHttpsAgent extends https.Agent {
  override createConnection(options: https.RequestOptions, cb?: (err: Error | null, s: Duplex) => void): Duplex | null | undefined {
    return unref(super.createConnection(options, cb));
  }
}

function unref<S extends Duplex | null | undefined>(s: S): S {
  (s as { unref?: () => void } | null | undefined)?.unref?.();
  return s;
}

/** Aborts ctl when signal does; returns the function that unlinks them. */
export function link(signal: AbortSignal | undefined, ctl: AbortController): () => void {
  if (!signal) return () => {};
  if (signal.aborted) {
    ctl.abort(signal.reason);
    return () => {};
  }
  const onAbort = () => ctl.abort(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  return () => signal.removeEventListener("abort", onAbort);
}

/** What an aborted signal says, as an error to throw. */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DistlockError("canceled", "the call was canceled");
}

// title is the proto's name of a method: "acquire" is "Acquire".
function title(method: string): string {
  return method.charAt(0).toUpperCase() + method.slice(1);
}

// systemCode is Node's code of the error ("ECONNRESET", ...) that broke a
// call at the client's end, if one did; undefined for an answer of the
// service.
function systemCode(e: ConnectError): string | undefined {
  const seen = new Set<unknown>();
  for (let c: unknown = e.cause; c instanceof Error && !seen.has(c); c = c.cause) {
    seen.add(c);
    const code = (c as { code?: unknown }).code;
    if (typeof code === "string") return code;
  }
  return undefined;
}
