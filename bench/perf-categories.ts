/**
 * How bench/perf.ts sorts workerd's perf samples into categories. A sample is one call stack,
 * leaf first. Its category is that of the innermost frame some rule claims. Frames no rule
 * claims (allocators, libc, jsg's type glue, IoContext plumbing, ...) are transparent, so their
 * cost goes to the nearest claimed caller: the memcpy in a SQLite write is sqlite, the jsg unwrap
 * in a Headers call is response_headers, a V8 runtime function called from JavaScript is js, a
 * Headers destructor run by the GC's sweeper is response_headers. Exceptions: a leaf in the
 * kernel is `kernel` whatever called it (SQLite's syscalls and the sockets' alike), and a stack
 * no rule claims is `other`.
 *
 * What some categories take in, beyond their names:
 * - sqlite: workerd's layer over SQLite too (the SQL API, which also builds the rows' JS objects,
 *   the VFS, the Durable Object's implicit transaction and its commit from the event loop).
 * - js: JIT code, V8's builtins (Ignition's bytecode handlers among them), what they call in V8,
 *   and V8's compilers. JavaScript that runs in one of Miniflare's scripts (the D1 simulator:
 *   its database worker, its entry worker and shared modules) and workerd's D1 binding
 *   (cloudflare-internal:d1-api) is `d1_simulator` instead; the SQLite it runs stays sqlite.
 * - rpc: workerd's JS RPC (the Worker calling the Durable Object), capnp, and the kj event loop
 *   and promise machinery, which runs everything between two callbacks.
 * - gc: V8's and cppgc's collectors, and V8's background jobs other than compiles.
 * - http_server: the Rust front end (hyper on tokio, bridged to kj), kj's HTTP, the Request and
 *   its body streams. Rust code keeps no frame pointers, so these stacks are often cut short.
 *
 * Calibrated on `perf report --no-children --sort sym` of both targets under the benchmark's
 * load (2026-12-01, workerd 1.20261117): `other` was 1-1.5% of the samples. A new workerd can
 * rename things; if `other` grows, run with --keep and look at that report.
 */

export type Frame = { ip: bigint; sym: string; dso: string };

export const CATEGORIES = ["sqlite", "js", "gc", "serializer", "rpc", "response_headers", "http_server", "kernel", "d1_simulator", "other"] as const;
export type Category = (typeof CATEGORIES)[number];

/** JIT code, which perf attributes to V8's /tmp/perf-<pid>.map (--perf-basic-prof). */
export const isJitFrame = (f: Frame): boolean => /\/perf-\d+\.map$/.test(f.dso);

/** JavaScript: JIT code and V8's embedded builtins (the interpreter's handlers are builtins too). */
export const isJsFrame = (f: Frame): boolean => isJitFrame(f) || /^Builtins_|^(Builtin|BytecodeHandler|LazyCompile|InterpretedFunction|Stub|RegExp)[:.]/.test(f.sym);

const D1_SCRIPT = /\b(database\.worker\.js|entry\.worker\.js|miniflare:|cloudflare-internal:d1-api)/;

const KERNEL_START = 0xffff_8000_0000_0000n;
export const isKernelFrame = (f: Frame): boolean => f.dso === "[kernel.kallsyms]" || (f.dso === "[unknown]" && f.ip >= KERNEL_START);

// SQLite itself (its static functions by their prefixes) and workerd's layer right over it.
const SQLITE = /^(sqlite3|pager|wal|btree|vdbe|pcache|unix[A-Z]|robust_|memjrnl|balance_|yy_)|^workerd::(SqliteDatabase|ActorSqlite|SqliteKv|api::SqlStorage)/;

/** First match wins within a frame; the order matters where a name would match two rules. */
const RULES: [Category, RegExp][] = [
  ["sqlite", SQLITE],
  ["serializer", /^v8::(internal::)?Value(Des|S)erializer|^workerd::jsg::(Des|S)erializer|structuredClone/i],
  [
    "gc",
    /^v8::internal::(Heap::|HeapAllocator|Scavenge|MarkCompact|MinorMarkSweep|MinorMS|ConcurrentMark|IncrementalMarking|Marking|MainMarking|Sweeper|GCTracer|MemoryAllocator|PagedSpace|\w*Evacuat|\w*ObjectVisitor|GlobalHandles::(IterateWeak|Process|Compute|PostGarbage)|\w*EmbedderRoots|CppHeap::|LocalHeap::|ArrayBufferSweeper|TracedHandles::|\(anonymous namespace\)::Parallel)|^cppgc::internal::(Sweeper|Marker|\w*Marking|HeapVisitor|\w*MarkingVisitor|StatsCollector|Heap::|HeapBase::Finalize)|^heap::base::|^workerd::jsg::HeapTracer::(Trace|Reset|finalize|clearWrappers)/,
  ],
  // V8 compiling JavaScript, on the main thread or a worker: counted with the JavaScript.
  ["js", /^v8::internal::(compiler|maglev|baseline)::|^v8::internal::(\w*Compil|OptimizingCompileDispatcher)/],
  // V8's other background jobs are heap work (concurrent marking, sweeping, weak handles).
  ["gc", /^v8::platform::(DefaultJobWorker|DefaultWorkerThreadsTaskRunner)/],
  // workerd's JS RPC (the Worker calling the Durable Object) and the capnp calls under it, and
  // the kj event loop and promise machinery that runs everything between the callbacks, up to
  // the loop's root in the tokio bridge.
  [
    "rpc",
    /^capnp::|^workerd::(rpc::|api::JsRpc|api::EntrypointJsRpcTarget|api::GlobalActorOutgoingFactory|api::Fetcher::getRpcMethod)|JsRpcTarget|^kj::_::(Event::|waitImpl|\w*PromiseNode|PromiseAwaiter|Fork(Branch|Hub)|Coroutine|\w*Fulfiller)|^kj::(TaskSet|EventLoop|Executor|Canceler|Promise<|WaitScope)|^kj_rs_tokio::TokioAsyncIoContext|^workerd_server::entry::/,
  ],
  ["response_headers", /^workerd::api::(Response|Headers)\b|^kj::HttpHeaders/],
  // The Rust front end (hyper over tokio, bridged to kj), kj's HTTP, a request's body streams;
  // Rust code has no frame pointers, so its stacks are often cut off after a frame or two.
  [
    "http_server",
    /^<?&?(kj_hyper|hyper|hyper_util|httparse|http|tokio|mio|bytes|futures_util|futures_core|atomic_waker|kj_rs|kj_rs_io|workerd_server|worker::cxx_worker)::|^core::ptr::drop_glue::<.*\b(hyper|http|tokio|mio|bytes)::|^kj::(HttpServer|HttpService|\w*Http|AsyncIoStream|AsyncInputStream|AsyncOutputStream|\(anonymous namespace\)::\w*(Http|AsyncStreamFd|AsyncIoStream)|UnixEventPort|\w*FdInputStream)|^workerd::(server::Server::HttpListener|api::(Request|Body|ReadableStream|JsReadableStream|ReadableStreamInternalController|\(anonymous namespace\)::EncodedAsyncInputStream|ServiceWorkerGlobalScope::request))/,
  ],
  // A socket call in libc whose caller the unwinder lost.
  ["http_server", /^(__libc_recv|__libc_send|__GI___writev|__GI___readv|__libc_recvmsg|__libc_sendmsg|epoll_wait)$/],
];

/** The sample's category and the index of the frame that decided it (-1: none did). */
export function categorize(stack: Frame[]): { category: Category; at: number } {
  if (stack.length > 0 && isKernelFrame(stack[0]!)) return { category: "kernel", at: 0 };
  for (let i = 0; i < stack.length; i++) {
    const f = stack[i]!;
    if (isJsFrame(f)) {
      // A builtin belongs to the script whose function called it.
      const fn = stack.findIndex((g, j) => j >= i && isJitFrame(g));
      return { category: fn >= 0 && D1_SCRIPT.test(stack[fn]!.sym) ? "d1_simulator" : "js", at: i };
    }
    for (const [category, re] of RULES) if (re.test(f.sym)) return { category, at: i };
  }
  return { category: "other", at: -1 };
}

/** A JIT frame's function without V8's tier marker ("JS:*'fetch index.js:1:2" -> "fetch index.js:1:2"), so its tiers add up. */
const jsName = (sym: string): string => sym.replace(/^JS:[~^+*]?'?/, "").replace(/^ /, "(anonymous) ");

/**
 * The innermost JavaScript function at or above frame `from`. Functions V8 runs in its
 * interpreter have no frame of their own in perf, only the shared InterpreterEntryTrampoline
 * (--interpreted-frames-native-stack did not change that in this workerd), so they cannot be named.
 */
function nearestFunction(stack: Frame[], from: number): string | undefined {
  for (let j = from; j < stack.length; j++) {
    if (isJitFrame(stack[j]!)) return jsName(stack[j]!.sym);
    if (stack[j]!.sym === "Builtins_InterpreterEntryTrampoline") return "(an interpreted JS function)";
  }
  return undefined;
}

/** For a js sample: the innermost JavaScript function (a builtin's time goes to its caller). */
export function jsFunction(stack: Frame[], at: number): string {
  return nearestFunction(stack, at) ?? `(no JS function) ${stack[at]?.sym ?? "?"}`;
}

/**
 * For a sqlite sample: the JavaScript function that issued the SQL, i.e. the nearest function
 * above the SQLite frames; without one (the implicit transaction's commit, run from the event
 * loop), the outermost frame of workerd's SQLite layer, which says what ran it.
 */
export function sqliteCaller(stack: Frame[], at: number): string {
  const fn = nearestFunction(stack, at + 1);
  if (fn !== undefined) return fn;
  let outer = at;
  for (let j = at; j < stack.length; j++) if (SQLITE.test(stack[j]!.sym)) outer = j;
  return `(no JS) ${stack[outer]!.sym.replace(/[<(].*$/, "")}`;
}
