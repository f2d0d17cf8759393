/**
 * The relay's floor, its Worker half: the least a Worker can do to pass an OpenAI call on.
 * No key check, no engine, no envelope or signature: the request's body goes to PROXY on the
 * same path, and the answer (a stream stays a stream) comes back as it is. It leaves through
 * a workerd network binding, as the exchange's relay does locally (Env.RELAY_NETWORK).
 * Plain JavaScript so Miniflare serves it without a bundler.
 */
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const body = request.method === "GET" ? undefined : await request.text();
    const res = await env.NET.fetch(env.PROXY + url.pathname, {
      method: request.method,
      headers: { "content-type": "application/json", authorization: request.headers.get("authorization") ?? "" },
      body,
    });
    return new Response(res.body, { status: res.status, headers: { "content-type": res.headers.get("content-type") ?? "application/json" } });
  },
};
