// The heat map's colour scale: a GPU's utilisation 0..1 to a colour, from cool (idle, costing money
// for nothing) to hot (busy). Unknown utilisation is neutral grey.

export interface Stop {
  at: number;
  rgb: [number, number, number];
}

/** Perceptually ordered stops, readable in both themes (text colour chosen by `textOn`). */
export const STOPS: Stop[] = [
  { at: 0, rgb: [30, 58, 138] }, // idle: deep blue
  { at: 0.25, rgb: [37, 99, 235] },
  { at: 0.5, rgb: [13, 148, 136] },
  { at: 0.75, rgb: [234, 179, 8] },
  { at: 1, rgb: [220, 38, 38] }, // saturated: red
];
export const UNKNOWN: [number, number, number] = [120, 120, 128];

export function heatRgb(util: number | null | undefined): [number, number, number] {
  if (util == null || !Number.isFinite(util)) return UNKNOWN;
  const x = Math.min(1, Math.max(0, util));
  for (let i = 1; i < STOPS.length; i++) {
    const hi = STOPS[i]!;
    const lo = STOPS[i - 1]!;
    if (x <= hi.at) {
      const t = (x - lo.at) / (hi.at - lo.at);
      return [0, 1, 2].map((k) => Math.round(lo.rgb[k]! + (hi.rgb[k]! - lo.rgb[k]!) * t)) as [number, number, number];
    }
  }
  return STOPS[STOPS.length - 1]!.rgb;
}

export function heatColor(util: number | null | undefined): string {
  const [r, g, b] = heatRgb(util);
  return `rgb(${r}, ${g}, ${b})`;
}

/** WCAG relative luminance of an sRGB colour. */
export function luminance([r, g, b]: [number, number, number]): number {
  const lin = (c: number) => {
    const s = c / 255;
    return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

export function contrast(a: [number, number, number], b: [number, number, number]): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x) as [number, number];
  return (hi + 0.05) / (lo + 0.05);
}

/** Black or white, whichever reads better on the tile's colour. */
export function textOn(util: number | null | undefined): "#000" | "#fff" {
  const bg = heatRgb(util);
  return contrast(bg, [0, 0, 0]) >= contrast(bg, [255, 255, 255]) ? "#000" : "#fff";
}

/** A GPU's shares drawn as segments of its tile: each share's part (0..1) and who holds it. */
export function segments(
  shares: { milli: number; workload_id?: string | null }[],
): { part: number; workload_id: string | null }[] {
  const out = shares.map((s) => ({ part: Math.max(0, Math.min(1, s.milli / 1000)), workload_id: s.workload_id ?? null }));
  const held = out.reduce((sum, s) => sum + s.part, 0);
  if (held < 1) out.push({ part: 1 - held, workload_id: null });
  return out;
}
