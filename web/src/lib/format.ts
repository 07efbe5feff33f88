// How numbers read on the dashboard: GPU-hours, money, shares, durations, ages.

/** GPU-hours: "0", "0.25", "12.5", "1,234". */
export function gpuHours(h: number | null | undefined): string {
  if (h == null || !Number.isFinite(h)) return "—";
  const abs = Math.abs(h);
  if (abs === 0) return "0";
  if (abs < 0.01) return "<0.01";
  const digits = abs < 10 ? 2 : abs < 100 ? 1 : 0;
  return h.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

/** US dollars: "$0.00", "$12.50", "$1,234" (no cents past a thousand). */
export function money(usd: number | null | undefined): string {
  if (usd == null || !Number.isFinite(usd)) return "—";
  const digits = Math.abs(usd) >= 1000 ? 0 : 2;
  const text = Math.abs(usd).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  return `${usd < 0 ? "-" : ""}$${text}`;
}

/** A share 0..1 as a percentage: "42%", "—" when unknown. */
export function pct(x: number | null | undefined): string {
  if (x == null || !Number.isFinite(x)) return "—";
  return `${Math.round(x * 100)}%`;
}

/** A count of GPUs that may be fractional (shares): "3", "2.25". */
export function gpus(n: number): string {
  return Number.isInteger(n) ? `${n}` : n.toFixed(2).replace(/0$/, "");
}

export function gib(mb: number | null | undefined): string {
  if (mb == null) return "—";
  const g = mb / 1024;
  return g >= 10 ? `${Math.round(g)}` : g.toFixed(1).replace(/\.0$/, "");
}

/** A duration in seconds: "45 s", "12 min", "3 h 5 min", "2 d 4 h". */
export function duration(s: number | null | undefined): string {
  if (s == null || !Number.isFinite(s)) return "—";
  const t = Math.max(0, Math.round(s));
  if (t < 60) return `${t} s`;
  if (t < 3600) return `${Math.floor(t / 60)} min`;
  if (t < 86400) {
    const m = Math.floor((t % 3600) / 60);
    return `${Math.floor(t / 3600)} h${m ? ` ${m} min` : ""}`;
  }
  const h = Math.floor((t % 86400) / 3600);
  return `${Math.floor(t / 86400)} d${h ? ` ${h} h` : ""}`;
}

/** How long ago: "5 s ago", "3 min ago"; "" when unknown. */
export function ago(iso: string | null | undefined, now: number = Date.now()): string {
  if (!iso) return "";
  return `${duration((now - new Date(iso).getTime()) / 1000)} ago`;
}

export function time(iso: string | null | undefined): string {
  if (!iso) return "—";
  const d = new Date(iso);
  return d.toLocaleString("en-GB", { dateStyle: "short", timeStyle: "medium" });
}

/** What a workload asks for, GPU-wise: "2", "0.25 GPU" for a share of one, "MIG 1g.10gb", "CPU". */
export function gpusAsked(r: { gpu_count: number; gpu_milli: number; mig_profile?: string | null }): string {
  if (r.mig_profile) return `MIG ${r.mig_profile}`;
  if (r.gpu_count === 0) return "CPU";
  if (r.gpu_count === 1 && r.gpu_milli < 1000) return `${r.gpu_milli / 1000} GPU`;
  return `${r.gpu_count}`;
}

/**
 * What a workload asks for across its nodes: a gang member's GPUs per node times its gang's nodes
 * ("2 × 3 nodes", "MIG 1g.10gb × 2 nodes"); what `gpusAsked` reads for work on one node.
 */
export function gpusAcross(w: { resources: Parameters<typeof gpusAsked>[0]; gang_size?: number | null }): string {
  const each = gpusAsked(w.resources);
  return w.gang_size != null && w.gang_size > 1 ? `${each} × ${w.gang_size} nodes` : each;
}

/** snake_case to words: "realtime_inference" → "realtime inference". */
export function words(s: string | null | undefined): string {
  return (s ?? "").replace(/_/g, " ");
}
