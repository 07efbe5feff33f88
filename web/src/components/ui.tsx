import type { ReactNode } from "react";
import { ApiError } from "../api/client";
import { words } from "../lib/format";

export function Badge({ children, kind = "" }: { children: ReactNode; kind?: string }) {
  return <span className={`badge ${kind}`}>{children}</span>;
}

export function StateBadge({ state }: { state: string }) {
  return (
    <span className={`state state-${state}`} data-state={state}>
      {words(state)}
    </span>
  );
}

export function Stat({ label, value, hint, testId }: { label: string; value: ReactNode; hint?: ReactNode; testId?: string }) {
  return (
    <div className="stat" data-testid={testId}>
      <dt>{label}</dt>
      <dd>{value}</dd>
      {hint && <dd className="hint">{hint}</dd>}
    </div>
  );
}

export function Section({ title, children, actions, id }: { title: string; children: ReactNode; actions?: ReactNode; id?: string }) {
  const hid = `h-${id ?? title.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  return (
    <section className="card" aria-labelledby={hid} data-section={id}>
      <div className="card-head">
        <h2 id={hid}>{title}</h2>
        {actions && <div className="card-actions">{actions}</div>}
      </div>
      {children}
    </section>
  );
}

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  const message = error instanceof Error ? error.message : String(error);
  return (
    <p className="error" role="alert">
      {error instanceof ApiError && error.status === 403 ? `Not allowed: ${message}` : message}
    </p>
  );
}

export function Loading({ what }: { what: string }) {
  return <p className="muted">Loading {what}…</p>;
}

export function PageHeader({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="page-head">
      <h1>{title}</h1>
      {children}
    </div>
  );
}

/**
 * A `<select>` of `options`, each shown in words ("batch_inference" reads "batch inference");
 * `all`, where given, labels a first choice of "" (no filter).
 */
export function WordSelect<T extends string>({ value, options, onChange, name, all }: { value: T; options: readonly T[]; onChange: (value: T) => void; name?: string; all?: string }) {
  return (
    <select name={name} value={value} onChange={(e) => onChange(e.target.value as T)}>
      {all !== undefined && <option value="">{all}</option>}
      {options.map((o) => (
        <option key={o} value={o}>
          {words(o)}
        </option>
      ))}
    </select>
  );
}
