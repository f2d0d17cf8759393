/**
 * The page's frame around an engine: the engine switcher, the sign-in form and the messages
 * that replace a blank page when something is wrong (no token, a refused token, no such engine,
 * the exchange unreachable).
 */
import type { Dom, DomInput } from "./dom";
import type { Format } from "./format";

export type NavEngine = { name: string; status: string | null; tone: string };
export type Notice = { kind: "error" | "warning" | "info"; title: string; text: string };

export function frameViewModule(dom: Dom, fmt: Format) {
  const { h, byId } = dom;

  function nav(engines: readonly NavEngine[], current: string, onSelect: (name: string) => void, onAdd: () => void): void {
    byId("engines").replaceChildren(
      ...engines.map((e) =>
        h(
          "button",
          {
            type: "button",
            class: e.name === current ? "engine-tab current" : "engine-tab",
            "data-engine": e.name,
            "aria-current": e.name === current ? "page" : null,
            title: e.status ?? "status unknown",
            onclick: () => onSelect(e.name),
          },
          h("span", { class: `dot ${e.tone}` }),
          e.name,
          e.status ? h("span", { class: "tab-status" }, fmt.status(e.status)) : null,
        ),
      ),
      h("button", { type: "button", class: "engine-tab add", id: "add-engine", onclick: onAdd }, "+ engine"),
    );
  }

  /** Shows a notice above the engine view; null clears it. */
  function notice(n: Notice | null): void {
    const el = byId("notice");
    el.hidden = n === null;
    el.className = n === null ? "notice" : `notice ${n.kind}`;
    el.replaceChildren(...(n === null ? [] : [h("strong", {}, n.title), h("p", {}, n.text)]));
    if (n !== null) el.setAttribute("data-kind", n.kind);
  }

  /** The sign-in form, prefilled with the engine; `why` says what the token is needed for. */
  function login(show: boolean, engine: string, why: string): void {
    byId("login").hidden = !show;
    if (!show) return;
    (byId("login-engine") as DomInput).value = engine;
    byId("login-why").textContent = why;
    (byId("login-token") as DomInput).focus();
  }

  return { nav, notice, login };
}
export type FrameView = ReturnType<typeof frameViewModule>;
