// validate.mjs DIR: validates the Kubernetes manifests of DIR offline.
//
// Every document is checked against its schema: the Kubernetes API's
// (package kubernetes-models) or KEDA's ScaledObject (package
// @kubernetes-models/keda), both generated from the published OpenAPI
// schemas and CRDs: types, required fields, enums and formats. Those
// schemas let unknown fields through, so fleet's own rules follow: every
// FLEET_* variable is a documented configuration key (docs/CONFIG.md), each
// operation in agents/ has a worker Deployment serving exactly it and a
// ScaledObject on its FLEET_RUNS consumers (one per priority) that targets
// that Deployment,
// containers run as non-root on a read-only root file system, and the
// kustomization lists every manifest. It prints what it checked and exits
// 1 on the first pass that found a problem.
import { readFileSync, readdirSync, existsSync, statSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const dir = resolve(process.argv[2] ?? "deploy/kubernetes");
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const problems = [];
const problem = (where, msg) => problems.push(`${where}: ${msg}`);

// apiVersion -> the module with its model classes.
const models = {
  v1: () => import("kubernetes-models/v1"),
  "apps/v1": () => import("kubernetes-models/apps/v1"),
  "keda.sh/v1alpha1": () => import("@kubernetes-models/keda/keda.sh/v1alpha1"),
};

const files = readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort();
const objects = []; // {file, obj}
let kustomization = null;
for (const file of files) {
  const docs = parseAllDocuments(readFileSync(join(dir, file), "utf8"));
  for (const doc of docs) {
    if (doc.errors.length) {
      problem(file, `YAML: ${doc.errors[0].message}`);
      continue;
    }
    const obj = doc.toJS();
    if (obj == null) continue;
    if (file === "nats-values.yaml") continue; // Helm values, not an object
    if (obj.kind === "Kustomization") {
      kustomization = obj;
      continue;
    }
    const where = `${file} ${obj.kind}/${obj.metadata?.name}`;
    const load = models[obj.apiVersion];
    if (!load) {
      problem(where, `apiVersion ${obj.apiVersion} has no schema here (add it to validate.mjs)`);
      continue;
    }
    const mod = await load();
    const Model = mod[obj.kind];
    if (!Model) {
      problem(where, `kind ${obj.kind} is not in ${obj.apiVersion}`);
      continue;
    }
    try {
      new Model(obj).validate();
    } catch (e) {
      problem(where, `schema: ${e.message}`);
      continue;
    }
    objects.push({ file, obj, where });
  }
}
console.log(`validate: ${objects.length} objects in ${files.length} files match their schemas`);

// Documented configuration keys: FLEET_* names in docs/CONFIG.md.
const documented = new Set(readFileSync(join(repo, "docs", "CONFIG.md"), "utf8").match(/FLEET_[A-Z0-9_]+/g));
const checkEnvName = (where, name) => {
  if (name.startsWith("FLEET_") && !documented.has(name)) problem(where, `${name} is not a configuration key of docs/CONFIG.md`);
};

const byKind = (kind) => objects.filter((o) => o.obj.kind === kind);
for (const { obj, where } of byKind("ConfigMap")) {
  for (const name of Object.keys(obj.data ?? {})) checkEnvName(where, name);
}
const workers = new Map(); // operation -> Deployment name
for (const { obj, where } of byKind("Deployment")) {
  const pod = obj.spec.template.spec;
  if (!pod.securityContext?.runAsNonRoot) problem(where, "the pod does not set runAsNonRoot");
  for (const c of pod.containers) {
    const sc = c.securityContext ?? {};
    if (!sc.readOnlyRootFilesystem || sc.allowPrivilegeEscalation !== false) {
      problem(where, `container ${c.name}: want readOnlyRootFilesystem and allowPrivilegeEscalation: false`);
    }
    for (const e of c.env ?? []) checkEnvName(`${where} ${c.name}`, e.name);
    const op = (c.env ?? []).find((e) => e.name === "FLEET_WORKER_OPERATIONS")?.value;
    if (op !== undefined) {
      if (op.includes(",")) problem(where, `serves ${op}: one operation per Deployment, so that each scales on its own backlog`);
      if (workers.has(op)) problem(where, `a second Deployment serves ${op}`);
      workers.set(op, obj.metadata.name);
    }
  }
}
const operations = readdirSync(join(repo, "agents")).filter((d) => existsSync(join(repo, "agents", d, "agent.yaml")));
// An operation's consumers: <operation> (normal), <operation>-HIGH and
// <operation>-LOW (docs/PROTOCOL.md §19); its ScaledObject needs all three.
const prioritySuffixes = ["", "-HIGH", "-LOW"];
const scaled = new Map(); // operation -> ScaledObject
for (const { obj, where } of byKind("ScaledObject")) {
  const consumers = new Set();
  for (const t of obj.spec.triggers) {
    if (t.type !== "nats-jetstream") continue;
    const m = t.metadata ?? {};
    if (m.stream !== "FLEET_RUNS") problem(where, `scales on stream ${m.stream}, want FLEET_RUNS`);
    const op = String(m.consumer).replace(/-(HIGH|LOW)$/, "");
    if (!operations.includes(op)) problem(where, `consumer ${m.consumer} is no consumer of an operation of agents/`);
    if (workers.get(op) !== obj.spec.scaleTargetRef.name) {
      problem(where, `targets ${obj.spec.scaleTargetRef.name}, but operation ${op} is served by ${workers.get(op) ?? "no Deployment"}`);
    }
    if (!(Number(m.lagThreshold) > 0)) problem(where, `lagThreshold ${m.lagThreshold} must be a positive number`);
    consumers.add(m.consumer);
    if (scaled.has(op) && scaled.get(op) !== obj) problem(where, `a second ScaledObject scales operation ${op}`);
    scaled.set(op, obj);
  }
  for (const op of new Set([...consumers].map((c) => c.replace(/-(HIGH|LOW)$/, "")))) {
    for (const suffix of prioritySuffixes) {
      if (!consumers.has(op + suffix)) problem(where, `no trigger on consumer ${op + suffix}: a backlog of that priority would not scale the workers`);
    }
  }
}
const before = problems.length;
for (const op of operations) {
  if (!workers.has(op)) problem("workers", `operation ${op} (agents/${op}) has no Deployment`);
  if (!scaled.has(op)) problem("scaledobjects", `operation ${op} has no nats-jetstream ScaledObject`);
}
if (problems.length === before) {
  console.log(`validate: operations ${operations.join(", ")}: each has its worker Deployment and ScaledObject`);
}

if (!kustomization) {
  problem("kustomization.yaml", "missing");
} else {
  const listed = new Set(kustomization.resources ?? []);
  for (const r of listed) {
    if (!existsSync(join(dir, r)) || !statSync(join(dir, r)).isFile()) problem("kustomization.yaml", `lists ${r}, which does not exist`);
  }
  for (const f of new Set(objects.map((o) => o.file))) {
    if (!listed.has(f)) problem("kustomization.yaml", `does not list ${f}`);
  }
}

if (problems.length) {
  for (const p of problems) console.error(`validate: FAIL: ${p}`);
  process.exit(1);
}
console.log("validate: ok");
