/**
 * The page's frame around an engine: the engine switcher, the sign-in form and the messages
 * that replace a blank page when something is wrong (no token, a refused token, no such engine,
 * the exchange unreachable).
 */
import type { Dom, DomElement, DomInput, DomKeyEvent } from "./dom";
import type { Format } from "./format";

export type NavEngine = { name: string; status: string | null; tone: string };
export type Notice = { kind: "error" | "warning" | "info"; title: string; text: string };

export function frameViewModule(dom: Dom, fmt: Format) {
  const { h, byId } = dom;
  /**
   * Up to this many engines, the switcher is a button per engine. Past it (or when the buttons
   * do not fit on one line), it is the current engine's button and a search box whose list the
   * typed words narrow: the bar stays one line high whatever the number of engines.
   */
  const BUTTONS_MAX = 12;

  // What the picker lists and does, set by each nav(); its listeners are wired once and read them.
  let listed: readonly NavEngine[] = [];
  let current = "";
  let select: (name: string) => void = () => undefined;
  let add: () => void = () => undefined;
  let wired = false;
  /** The engines the picker's list shows now, and the one the arrow keys point at (by name, so a redraw keeps it). */
  let shown: NavEngine[] = [];
  let active: string | null = null;
  /** Whether the search box has the focus: a refresh that shows the sign-in form must not take it away. */
  let searching = false;

  const search = () => byId("engine-search") as DomInput;
  const popup = () => byId("engine-popup");

  function tab(e: NavEngine): DomElement {
    return h(
      "button",
      {
        type: "button",
        class: e.name === current ? "engine-tab current" : "engine-tab",
        "data-engine": e.name,
        "aria-current": e.name === current ? "page" : null,
        title: `${e.name}: ${e.status ?? "status unknown"}`,
        onclick: () => select(e.name),
      },
      h("span", { class: `dot ${e.tone}` }),
      h("span", { class: "tab-name" }, e.name),
      e.status ? h("span", { class: "tab-status" }, fmt.status(e.status)) : null,
    );
  }

  /** Every word typed must appear in the name, in any order: "gsm 042" finds exp-042-gsm8k-grpo. */
  function matching(query: string): NavEngine[] {
    const words = query.toLowerCase().split(/\s+/).filter((w) => w !== "");
    return listed.filter((e) => words.every((w) => e.name.toLowerCase().includes(w)));
  }

  function drawOptions(): void {
    const input = search();
    shown = matching(input.value);
    if (active !== null && !shown.some((e) => e.name === active)) active = null;
    byId("engine-options").replaceChildren(
      ...shown.map((e, i) =>
        h(
          "li",
          {
            id: `engine-option-${i}`,
            role: "option",
            class: e.name === current ? "engine-option current" : "engine-option",
            "data-engine": e.name,
            "aria-selected": String(e.name === active),
            title: e.status ?? "status unknown",
            onclick: () => choose(e.name),
          },
          h("span", { class: `dot ${e.tone}` }),
          h("span", { class: "option-name" }, e.name),
          e.status ? h("span", { class: "tab-status" }, fmt.status(e.status)) : null,
        ),
      ),
    );
    const at = shown.findIndex((e) => e.name === active);
    if (at < 0) input.removeAttribute("aria-activedescendant");
    else {
      input.setAttribute("aria-activedescendant", `engine-option-${at}`);
      byId(`engine-option-${at}`).scrollIntoView({ block: "nearest" });
    }
    const typed = input.value.trim();
    byId("engine-count").textContent =
      shown.length === 0 ? `No engine matches “${typed}”` : shown.length === listed.length ? `${listed.length} engines` : `${shown.length} of ${listed.length} engines`;
  }

  function open(): void {
    popup().hidden = false;
    search().setAttribute("aria-expanded", "true");
    drawOptions();
  }

  function close(): void {
    popup().hidden = true;
    active = null;
    search().setAttribute("aria-expanded", "false");
    search().removeAttribute("aria-activedescendant");
  }

  function choose(name: string): void {
    const input = search();
    input.value = "";
    close();
    input.blur();
    select(name);
  }

  function move(by: 1 | -1): void {
    if (popup().hidden) open();
    if (shown.length === 0) return;
    const at = shown.findIndex((e) => e.name === active);
    const next = at < 0 ? (by > 0 ? 0 : shown.length - 1) : (at + by + shown.length) % shown.length;
    active = shown[next]?.name ?? null;
    drawOptions();
  }

  function wire(): void {
    if (wired) return;
    wired = true;
    byId("add-engine").addEventListener("click", () => add());
    const input = search();
    input.addEventListener("focus", () => {
      searching = true;
      open();
    });
    input.addEventListener("click", () => {
      if (popup().hidden) open();
    });
    input.addEventListener("input", () => {
      active = null;
      open();
    });
    // A press on the list keeps the focus in the box (so the box's blur does not close the list under the click).
    popup().addEventListener("mousedown", (ev) => ev.preventDefault());
    input.addEventListener("blur", () => {
      searching = false;
      close();
    });
    input.addEventListener("keydown", (ev) => {
      const key = (ev as DomKeyEvent).key;
      if (key === "ArrowDown" || key === "ArrowUp") {
        ev.preventDefault();
        move(key === "ArrowDown" ? 1 : -1);
      } else if (key === "Enter") {
        ev.preventDefault();
        // The option the arrows point at, else the first match: typing part of a name and Enter opens it.
        const pick = shown.find((e) => e.name === active) ?? shown[0];
        if (!popup().hidden && pick !== undefined) choose(pick.name);
      } else if (key === "Escape" && !popup().hidden) {
        // A second Escape clears the box (the search box's own behaviour).
        ev.preventDefault();
        close();
      }
    });
  }

  function nav(engines: readonly NavEngine[], currentName: string, onSelect: (name: string) => void, onAdd: () => void): void {
    listed = engines;
    current = currentName;
    select = onSelect;
    add = onAdd;
    wire();
    const tabs = byId("engine-tabs");
    const picker = byId("engine-picker");
    if (engines.length <= BUTTONS_MAX) {
      tabs.className = "engine-tabs";
      tabs.replaceChildren(...engines.map(tab));
      picker.hidden = true;
      if (tabs.scrollWidth <= tabs.clientWidth) {
        if (!popup().hidden) close();
        return;
      }
    }
    // The current engine's button alone, which may shorten its name to leave the search box room.
    tabs.className = "engine-tabs picking";
    tabs.replaceChildren(...engines.filter((e) => e.name === currentName).map(tab));
    picker.hidden = false;
    search().setAttribute("placeholder", `Find an engine (${engines.length})…`);
    // The list is redrawn in place (statuses change), keeping what is typed, the focus and the option pointed at.
    if (!popup().hidden) drawOptions();
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
    if (!searching) (byId("login-token") as DomInput).focus();
  }

  return { nav, notice, login };
}
export type FrameView = ReturnType<typeof frameViewModule>;
