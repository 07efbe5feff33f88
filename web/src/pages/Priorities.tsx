import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { PageProps } from "../App";
import { ApiError, api, unwrap } from "../api/client";
import type { PrioritySettings, PriorityPreview } from "../api/types";
import { DecisionDiff } from "../components/DecisionDiff";
import { ErrorNote, Loading, PageHeader, Section } from "../components/ui";
import { usePriorities } from "../lib/queries";

type Field = { key: keyof PrioritySettings; label: string; help: string; kind: "int" | "bool"; min?: number; max?: number };
const GROUPS: { title: string; fields: Field[] }[] = [
  {
    title: "Customer-facing services vs internal training",
    fields: [
      { key: "realtime_first", label: "Real-time inference first", help: "Real-time inference is placed before every other class.", kind: "bool" },
      { key: "burst_reserve_gpus", label: "Burst reserve (GPUs)", help: "GPUs kept free for real-time inference to burst into.", kind: "int", min: 0 },
    ],
  },
  {
    title: "Night window",
    fields: [
      { key: "night_training_bonus", label: "Training bonus at night", help: "Priority added to training and fine-tuning inside the window.", kind: "int", min: 0 },
      { key: "night_start_hour", label: "Night starts (hour, UTC)", help: "0–23", kind: "int", min: 0, max: 23 },
      { key: "night_end_hour", label: "Night ends (hour, UTC)", help: "0–23", kind: "int", min: 0, max: 23 },
    ],
  },
  {
    title: "Preemption rules",
    fields: [
      { key: "min_runtime_s", label: "Minimum runtime before preemption (s)", help: "Work that started less than this ago is not preempted.", kind: "int", min: 0 },
      { key: "grace_period_s", label: "Grace period (s)", help: "Between SIGTERM and SIGKILL when preempting.", kind: "int", min: 0 },
      { key: "max_preemptions_per_hour", label: "Preemptions per workload per hour", help: "At most this many.", kind: "int", min: 0 },
      { key: "checkpointable_only", label: "Preempt checkpointable work only", help: "Never preempt a workload that cannot checkpoint.", kind: "bool" },
    ],
  },
];

type PreviewAnswer = { absent: true } | { absent: false; preview: PriorityPreview };

export function Priorities({ can }: PageProps) {
  const saved = usePriorities();
  const client = useQueryClient();
  // The form shows the saved settings until the first edit, then the edited ones.
  const [edited, setForm] = useState<PrioritySettings | null>(null);
  const form = edited ?? saved.data ?? null;
  const [done, setDone] = useState("");
  const dirty = !!form && !!saved.data && JSON.stringify(form) !== JSON.stringify(saved.data);
  const preview = useQuery({
    queryKey: ["priorities", "preview", form],
    enabled: dirty && can.editPriorities,
    retry: false,
    queryFn: async (): Promise<PreviewAnswer> => {
      if (!form) throw new Error("No settings to preview."); // not enabled until there are
      try {
        return { absent: false, preview: await unwrap(api.POST("/api/v1/settings/priorities/preview", { body: form })) };
      } catch (err) {
        if (err instanceof ApiError && (err.status === 404 || err.status === 405)) return { absent: true };
        throw err;
      }
    },
  });
  const save = useMutation({
    mutationFn: (body: PrioritySettings) => unwrap(api.PUT("/api/v1/settings/priorities", { body })),
    onSuccess: (s) => {
      client.setQueryData(["priorities"], s);
      setForm(s);
      setDone(`Saved at ${new Date().toLocaleTimeString()}.`);
    },
  });
  if (saved.isPending || !form) return <Loading what="the priority settings" />;
  const set = (key: keyof PrioritySettings, value: number | boolean) => {
    setDone("");
    setForm({ ...form, [key]: value });
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    save.mutate(form);
  };
  const readOnly = !can.editPriorities;
  return (
    <>
      <PageHeader title="Priorities">
        {readOnly && <p className="muted">Only a platform admin changes these; you can read them.</p>}
      </PageHeader>
      <ErrorNote error={saved.error} />
      <form onSubmit={submit} data-testid="priorities-form">
        <div className="grid3">
          {GROUPS.map((g) => (
            <fieldset key={g.title} className="card" disabled={readOnly}>
              <legend>{g.title}</legend>
              {g.fields.map((f) =>
                f.kind === "bool" ? (
                  <label key={f.key} className="check">
                    <input type="checkbox" name={f.key} checked={Boolean(form[f.key])} onChange={(e) => set(f.key, e.target.checked)} aria-describedby={`help-${f.key}`} />
                    {f.label}
                    <span id={`help-${f.key}`} className="help">
                      {f.help}
                    </span>
                  </label>
                ) : (
                  <label key={f.key}>
                    {f.label}
                    <input
                      type="number"
                      name={f.key}
                      min={f.min}
                      max={f.max}
                      value={Number(form[f.key])}
                      onChange={(e) => set(f.key, Number(e.target.value))}
                      aria-describedby={`help-${f.key}`}
                    />
                    <span id={`help-${f.key}`} className="help">
                      {f.help}
                    </span>
                  </label>
                ),
              )}
            </fieldset>
          ))}
        </div>
        {!readOnly && (
          <div className="row sticky-actions">
            <button type="submit" className="primary" disabled={!dirty || save.isPending} data-testid="save-priorities">
              Save
            </button>
            <button type="button" disabled={!dirty} onClick={() => saved.data && setForm(saved.data)}>
              Reset
            </button>
            <span role="status" data-testid="priorities-status">
              {done || (dirty ? "Unsaved changes." : "")}
            </span>
          </div>
        )}
        <ErrorNote error={save.error} />
      </form>
      {dirty && !readOnly && <Preview answer={preview.data} error={preview.error} loading={preview.isFetching} />}
    </>
  );
}

function Preview({ answer, error, loading }: { answer: PreviewAnswer | undefined; error: unknown; loading: boolean }) {
  if (answer?.absent) return null; // No preview endpoint on this control plane.
  return (
    <Section title="What these settings would change now" id="preview">
      <ErrorNote error={error} />
      {!answer && loading && <Loading what="the preview" />}
      {answer && !answer.absent && <DecisionDiff comparison={answer.preview} candidate="with these settings" />}
    </Section>
  );
}
