/**
 * The interactive API reference at /docs: reads /openapi.json and lists every operation,
 * grouped by tag, with its roles, parameters, schemas and error answers, and a form that
 * sends a real request to this exchange and shows the answer. The token-in-URL twins of the
 * engine routes are summarized in one note instead of being listed a second time.
 */
import type { BrowserWindow, DomElement, DomInput, Dom } from "../../dashboard/client/dom";
import type { ExampleModule, Json } from "./example";

export function docsModule(win: BrowserWindow, dom: Dom, ex: ExampleModule) {
  const { h, byId } = dom;
  const TOKEN_KEY = "rollout-exchange.docs.v1";
  const HIDDEN_TAG = "engine, token in URL";
  type Rec = Record<string, unknown>;
  const isRecord = (v: unknown): v is Rec => typeof v === "object" && v !== null && !Array.isArray(v);
  const rec = (v: unknown): Rec => (isRecord(v) ? v : {});
  const str = (v: unknown): string => (typeof v === "string" ? v : "");
  const pretty = (v: unknown) => JSON.stringify(v, null, 2);

  let doc: Rec = {};

  /** Follows a local `$ref` (`#/components/...`) to what it names. */
  function deref(v: unknown): Rec {
    const r = rec(v);
    const ref = str(r["$ref"]);
    if (!ref.startsWith("#/")) return r;
    return rec(ref.slice(2).split("/").reduce<unknown>((node, key) => rec(node)[key], doc));
  }

  function authValues(): { engine: string; token: string } {
    return { engine: (byId("auth-engine") as DomInput).value.trim(), token: (byId("auth-token") as DomInput).value.trim() };
  }

  /** Sends the form's request. `key`: a claim's key, for the LLM relay's routes (their credential is not an engine token). */
  async function send(method: string, path: string, inputs: Map<string, DomInput>, inHeader: ReadonlySet<string>, body: DomInput | null, out: DomElement, key: DomInput | null): Promise<void> {
    const auth = authValues();
    const missing: string[] = [];
    let url = path.replace(/\{(\w+)\}/g, (_m, name: string) => {
      const v = name === "engine" ? auth.engine : name === "token" ? auth.token : (inputs.get(name)?.value.trim() ?? "");
      if (v === "") missing.push(name);
      return encodeURIComponent(v);
    });
    if (missing.length > 0) {
      out.textContent = `Fill in: ${missing.join(", ")}`;
      out.setAttribute("data-status", "");
      return;
    }
    const query = new URLSearchParams();
    const headers: Record<string, string> = {};
    for (const [name, input] of inputs) {
      if (path.includes(`{${name}}`) || input.value.trim() === "") continue;
      if (inHeader.has(name)) headers[name.toLowerCase()] = input.value.trim();
      else query.set(name, input.value.trim());
    }
    if (query.toString() !== "") url += `?${query.toString()}`;
    const claimKey = key?.value.trim() ?? "";
    if (claimKey !== "") headers["authorization"] = `Bearer ${claimKey}`;
    else if (auth.token !== "" && !path.includes("{token}")) headers["authorization"] = `Bearer ${auth.token}`;
    if (body) headers["content-type"] = "application/json";
    out.textContent = `${method.toUpperCase()} ${url} …`;
    try {
      const res = await win.fetch(url, { method: method.toUpperCase(), headers, ...(body ? { body: body.value } : {}) });
      const text = await res.text();
      let shown = text;
      try {
        shown = pretty(JSON.parse(text));
      } catch {
        // Not JSON: shown as it came.
      }
      out.textContent = `${res.status}\n${shown}`;
      out.setAttribute("data-status", String(res.status));
    } catch (e) {
      out.textContent = `Network error: ${e instanceof Error ? e.message : String(e)}`;
      out.setAttribute("data-status", "0");
    }
  }

  function operation(path: string, method: string, op: Rec): DomElement {
    const id = str(op["operationId"]);
    const params = (Array.isArray(op["parameters"]) ? op["parameters"] : []).map(deref);
    const own = params.filter((p) => str(p["name"]) !== "engine" && str(p["name"]) !== "token");
    const inputs = new Map<string, DomInput>();
    // If-None-Match on a trajectory: sent as a header, not in the query.
    const inHeader = new Set(own.filter((p) => str(p["in"]) === "header").map((p) => str(p["name"])));
    const bodySchema = rec(rec(rec(rec(op["requestBody"])["content"])["application/json"])["schema"]);
    const hasBody = isRecord(op["requestBody"]);
    const takesClaimKey = (Array.isArray(op["security"]) ? op["security"] : []).some((s) => "claimKey" in rec(s));
    const keyInput = takesClaimKey ? (h("input", { name: "claim-key", class: "mono", placeholder: "sk-rx.… (openai_api_key from claim_episode)" }) as DomInput) : null;
    const bodyInput = hasBody ? (h("textarea", { rows: 6, spellcheck: "false", class: "mono", "aria-label": "request body" }) as DomInput) : null;
    if (bodyInput) bodyInput.value = pretty(ex.example(bodySchema) satisfies Json);
    const out = h("pre", { class: "result", "aria-live": "polite" });
    const responses = Object.entries(rec(op["responses"]));
    const roles = Array.isArray(op["x-roles"]) ? op["x-roles"].map(str) : [];
    return h(
      "details",
      { class: "op", id, "data-method": method, "data-path": path },
      h(
        "summary",
        {},
        h("span", { class: `method ${method}` }, method.toUpperCase()),
        h("code", { class: "path" }, path),
        h("span", { class: "op-summary" }, str(op["summary"])),
        h("span", { class: "roles" }, ...roles.map((r) => h("span", { class: "role" }, r))),
      ),
      h(
        "div",
        { class: "op-body" },
        keyInput ? h("div", { class: "params" }, h("label", {}, h("span", {}, "claim key (bearer)"), keyInput)) : null,
        own.length > 0
          ? h(
              "div",
              { class: "params" },
              ...own.map((p) => {
                const name = str(p["name"]);
                const input = h("input", { name, placeholder: str(rec(p["schema"])["default"] ?? "") || (p["required"] === true ? "required" : "optional") }) as DomInput;
                inputs.set(name, input);
                return h("label", {}, h("span", {}, `${name} (${str(p["in"])})`), input);
              }),
            )
          : null,
        bodyInput ? h("label", { class: "body-label" }, h("span", {}, "Request body (JSON)"), bodyInput) : null,
        h(
          "div",
          { class: "send-row" },
          h("button", { type: "button", class: "send", onclick: () => void send(method, path, inputs, inHeader, bodyInput, out, keyInput) }, "Send"),
          h("span", { class: "sub" }, "Sends a real request to this exchange with the engine and token above."),
        ),
        out,
        h(
          "div",
          { class: "schemas" },
          hasBody ? h("details", {}, h("summary", {}, "Request schema"), h("pre", { class: "mono" }, pretty(bodySchema))) : null,
          ...responses.map(([status, r]) => {
            const resp = deref(r);
            // JSON mostly; Atropos's plain-text answers and the ledger's JSON lines have theirs.
            const content = rec(resp["content"]);
            const schema = rec(rec(content["application/json"] ?? Object.values(content)[0])["schema"]);
            return h(
              "details",
              {},
              h("summary", {}, h("strong", {}, status), ` ${str(resp["description"])}`),
              h("pre", { class: "mono" }, pretty(deref(schema))),
            );
          }),
        ),
      ),
    );
  }

  function render(): void {
    const tags = (Array.isArray(doc["tags"]) ? doc["tags"] : []).map(rec);
    const byTag = new Map<string, DomElement[]>();
    for (const [path, item] of Object.entries(rec(doc["paths"]))) {
      for (const [method, op] of Object.entries(rec(item))) {
        const tag = str((Array.isArray(rec(op)["tags"]) ? (rec(op)["tags"] as unknown[]) : [])[0]);
        // Token-in-URL twins are explained in the page's intro rather than listed twice.
        if (tag === HIDDEN_TAG || path.includes("{token}")) continue;
        const list = byTag.get(tag) ?? [];
        list.push(operation(path, method, rec(op)));
        byTag.set(tag, list);
      }
    }
    byId("ops").replaceChildren(
      ...tags
        .filter((t) => byTag.has(str(t["name"])))
        .map((t) =>
          h(
            "section",
            { class: "panel tag", "data-tag": str(t["name"]) },
            h("h2", {}, str(t["name"])),
            h("p", { class: "sub" }, str(t["description"])),
            ...(byTag.get(str(t["name"])) ?? []),
          ),
        ),
    );
    byId("op-count").textContent = String(Object.values(rec(doc["paths"])).reduce<number>((n, item) => n + Object.keys(rec(item)).length, 0));
  }

  async function start(): Promise<void> {
    const saved = rec((() => {
      try {
        return JSON.parse(win.localStorage.getItem(TOKEN_KEY) ?? "null") as unknown;
      } catch {
        return null;
      }
    })());
    (byId("auth-engine") as DomInput).value = str(saved["engine"]) || "default";
    (byId("auth-token") as DomInput).value = str(saved["token"]);
    byId("auth").addEventListener("submit", (ev) => ev.preventDefault());
    byId("auth").addEventListener("change", () => win.localStorage.setItem(TOKEN_KEY, JSON.stringify(authValues())));
    try {
      const res = await win.fetch("/openapi.json");
      doc = rec(JSON.parse(await res.text()));
      render();
    } catch (e) {
      byId("ops").replaceChildren(h("p", { class: "notice error" }, `Could not load /openapi.json: ${e instanceof Error ? e.message : String(e)}`));
    }
  }

  return { start };
}
