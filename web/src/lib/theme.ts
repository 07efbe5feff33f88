// Light and dark: follows prefers-color-scheme until the user picks one with the toggle.
import { useEffect, useSyncExternalStore } from "react";

export type Theme = "light" | "dark";
const KEY = "airtime.theme";
const subscribers = new Set<() => void>();
const media = () => window.matchMedia?.("(prefers-color-scheme: dark)");

function current(): Theme {
  const chosen = localStorage.getItem(KEY);
  if (chosen === "light" || chosen === "dark") return chosen;
  return media()?.matches ? "dark" : "light";
}

export function setTheme(theme: Theme): void {
  localStorage.setItem(KEY, theme);
  subscribers.forEach((cb) => cb());
}

export function useTheme(): Theme {
  const theme = useSyncExternalStore(
    (cb) => {
      subscribers.add(cb);
      const m = media();
      m?.addEventListener("change", cb);
      return () => {
        subscribers.delete(cb);
        m?.removeEventListener("change", cb);
      };
    },
    current,
  );
  useEffect(() => {
    document.documentElement.dataset.theme = theme;
  }, [theme]);
  return theme;
}
