import { useEffect, useState, useSyncExternalStore, type FormEvent } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { ApiError, api, onSessionChange, setToken, token, unwrap } from "./api/client";
import type { Me } from "./api/types";
import { can, type Can } from "./lib/roles";
import { Link, navigate, usePath } from "./lib/router";
import { setTheme, useTheme } from "./lib/theme";
import { useMe } from "./lib/queries";
import { useLive, useLiveFeed } from "./lib/live";
import { words } from "./lib/format";
import { Overview } from "./pages/Overview";
import { Fleet } from "./pages/Fleet";
import { GpuPage } from "./pages/Gpu";
import { NodePage } from "./pages/Node";
import { Workloads, WorkloadPage } from "./pages/Workloads";
import { Priorities } from "./pages/Priorities";
import { Policies } from "./pages/Policies";
import { Tenants } from "./pages/Tenants";
import { Decisions } from "./pages/Decisions";
import { Audit } from "./pages/Audit";
import { ServicePage, Services } from "./pages/Services";
import { Tokens } from "./pages/Tokens";
import { Users } from "./pages/Users";

export interface PageProps {
  me: Me;
  can: Can;
}

interface NavItem {
  to: string;
  label: string;
  show: (c: Can) => boolean;
}
const NAV: NavItem[] = [
  { to: "/", label: "Overview", show: () => true },
  { to: "/fleet", label: "Fleet", show: () => true },
  { to: "/workloads", label: "Workloads", show: () => true },
  { to: "/services", label: "Services", show: () => true },
  { to: "/priorities", label: "Priorities", show: () => true },
  { to: "/policies", label: "Policies", show: () => true },
  { to: "/tenants", label: "Tenants", show: () => true },
  { to: "/decisions", label: "Decisions", show: () => true },
  { to: "/audit", label: "Audit log", show: (c) => c.readAudit },
  { to: "/tokens", label: "Tokens", show: () => true },
  { to: "/users", label: "Users", show: (c) => c.readUsers },
];

function useSignedIn(): boolean {
  return useSyncExternalStore(onSessionChange, () => token() !== null);
}

export function App() {
  const theme = useTheme();
  const signedIn = useSignedIn();
  const client = useQueryClient();
  useEffect(() => {
    if (!signedIn) client.clear();
  }, [signedIn, client]);
  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      {signedIn ? <Shell theme={theme} /> : <Login />}
      {!signedIn && <ThemeToggle theme={theme} floating />}
    </>
  );
}

function ThemeToggle({ theme, floating }: { theme: string; floating: boolean }) {
  const next = theme === "dark" ? "light" : "dark";
  return (
    <button
      type="button"
      className={`theme-toggle ${floating ? "floating" : ""}`}
      data-testid="theme-toggle"
      aria-label={`Switch to the ${next} theme`}
      aria-pressed={theme === "dark"}
      onClick={() => setTheme(next)}
    >
      {theme === "dark" ? "☀ Light" : "☾ Dark"}
    </button>
  );
}

function Login() {
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [tenant, setTenant] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError("");
    setBusy(true);
    try {
      const session = await unwrap(api.POST("/api/v1/auth/login", { body: { email, password, ...(tenant ? { tenant } : {}) } }));
      setPassword("");
      setToken(session.token);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? "Wrong email or password." : (err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main id="main" className="login">
      <div className="login-card">
        <p className="brand">
          <span className="logo" aria-hidden="true">▲</span> Airtime
        </p>
        <p className="tagline">Every GPU hour, working.</p>
        <h1>Sign in</h1>
        <form id="login-form" onSubmit={submit}>
          <label>
            Email
            <input id="email" name="email" type="text" autoComplete="username" required value={email} onChange={(e) => setEmail(e.target.value)} />
          </label>
          <label>
            Password
            <input
              id="password"
              name="password"
              type="password"
              autoComplete="current-password"
              required
              value={password}
              onChange={(e) => setPassword(e.target.value)}
            />
          </label>
          <label>
            Tenant <span className="muted">(only if you belong to several)</span>
            <input id="tenant" name="tenant" type="text" value={tenant} onChange={(e) => setTenant(e.target.value)} />
          </label>
          <button type="submit" className="primary" disabled={busy}>
            Sign in
          </button>
          <p id="login-error" className="error" role="alert">
            {error}
          </p>
        </form>
      </div>
    </main>
  );
}

function Shell({ theme }: { theme: string }) {
  const me = useMe();
  const path = usePath();
  useLiveFeed();
  const live = useLive();
  if (me.isPending) return <p className="muted center">Loading…</p>;
  if (me.isError || !me.data) {
    return (
      <main id="main" className="center">
        <p className="error" role="alert">
          Cannot read your session: {(me.error as Error | null)?.message}
        </p>
        <button type="button" onClick={() => setToken(null)}>
          Sign in again
        </button>
      </main>
    );
  }
  const c = can(me.data);
  const nav = NAV.filter((n) => n.show(c));
  const active = (to: string) => (to === "/" ? path === "/" : path === to || path.startsWith(`${to}/`));
  const props: PageProps = { me: me.data, can: c };
  return (
    <div className="shell">
      <header className="topbar">
        <Link to="/" className="brand">
          <span className="logo" aria-hidden="true">▲</span> Airtime
        </Link>
        <nav aria-label="Main">
          <ul>
            {nav.map((n) => (
              <li key={n.to}>
                <Link to={n.to} aria-current={active(n.to) ? "page" : undefined} data-nav={n.label}>
                  {n.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div className="who" data-testid="who">
          <span className={live ? "badge live" : "badge"} data-testid="live" title={live ? "Changes arrive as they happen" : "Refreshing every few seconds"}>
            {live ? "● Live" : "○ Polling"}
          </span>
          <span>{me.data.email}</span>
          <span className="badge role">{words(me.data.role)}{me.data.tenant ? ` · ${me.data.tenant}` : ""}</span>
          <ThemeToggle theme={theme} floating={false} />
          <button
            type="button"
            id="logout"
            onClick={() => {
              setToken(null);
              navigate("/");
            }}
          >
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Route path={path} props={props} />
      </main>
    </div>
  );
}

function Route({ path, props }: { path: string; props: PageProps }) {
  const workload = /^\/workloads\/([^/]+)$/.exec(path);
  if (workload) return <WorkloadPage id={decodeURIComponent(workload[1]!)} {...props} />;
  const gpu = /^\/fleet\/gpus\/([^/]+)$/.exec(path);
  if (gpu) return <GpuPage id={decodeURIComponent(gpu[1]!)} {...props} />;
  const service = /^\/services\/([^/]+)$/.exec(path);
  if (service) return <ServicePage id={decodeURIComponent(service[1]!)} {...props} />;
  const node = /^\/fleet\/nodes\/([^/]+)$/.exec(path);
  if (node) return <NodePage id={decodeURIComponent(node[1]!)} {...props} />;
  switch (path) {
    case "/":
      return <Overview {...props} />;
    case "/fleet":
      return <Fleet {...props} />;
    case "/workloads":
      return <Workloads {...props} />;
    case "/priorities":
      return <Priorities {...props} />;
    case "/policies":
      return <Policies {...props} />;
    case "/tenants":
      return <Tenants {...props} />;
    case "/decisions":
      return <Decisions {...props} />;
    case "/services":
      return <Services {...props} />;
    case "/tokens":
      return <Tokens {...props} />;
    case "/users":
      return props.can.readUsers ? <Users {...props} /> : <NotFound />;
    case "/audit":
      return props.can.readAudit ? <Audit {...props} /> : <NotFound />;
    default:
      return <NotFound />;
  }
}

function NotFound() {
  return (
    <div className="page-head">
      <h1>Not found</h1>
      <p>
        There is no such page. <Link to="/">Back to the overview</Link>.
      </p>
    </div>
  );
}
