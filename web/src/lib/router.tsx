// A small client-side router over the History API: the control plane answers index.html for any
// non-API path, so /fleet or /workloads/<id> can be reloaded and shared.
import { useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from "react";

const subscribers = new Set<() => void>();
function subscribe(cb: () => void) {
  subscribers.add(cb);
  window.addEventListener("popstate", cb);
  return () => {
    subscribers.delete(cb);
    window.removeEventListener("popstate", cb);
  };
}

export function navigate(to: string): void {
  if (to === window.location.pathname + window.location.search) return;
  window.history.pushState(null, "", to);
  subscribers.forEach((cb) => cb());
  window.scrollTo(0, 0);
}

export function usePath(): string {
  return useSyncExternalStore(subscribe, () => window.location.pathname);
}

export function Link({ to, onClick, ...rest }: AnchorHTMLAttributes<HTMLAnchorElement> & { to: string }) {
  const go = (e: MouseEvent<HTMLAnchorElement>) => {
    onClick?.(e);
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return <a href={to} onClick={go} {...rest} />;
}
