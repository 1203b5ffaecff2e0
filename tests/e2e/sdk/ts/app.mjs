// An application written against the released TypeScript SDK (@resonatehq/sdk), as its users write one.
//
//   node app.mjs worker URL GROUP               a worker of GROUP until SIGTERM
//   node app.mjs hello URL GROUP ID             run greet here and rpc it to GROUP
//   node app.mjs fanout URL GROUP ID N          rpc fanOut(N) to GROUP: N local and N remote children
//   node app.mjs sleep URL GROUP ID SECONDS     rpc napper(SECONDS) to GROUP: a durable sleep
//
// A client prints its answer as one JSON line. Events go to the journal file named by SDK_JOURNAL,
// which tests/e2e/sdk shares with the Python application.
import { appendFileSync } from "node:fs";
import { Resonate } from "@resonatehq/sdk";

const [mode, url, group, id, arg] = process.argv.slice(2);

function journal(event, key, fields = {}) {
  if (process.env.SDK_JOURNAL) {
    const line = JSON.stringify({ event, key, pid: process.pid, at: Date.now(), ...fields });
    appendFileSync(process.env.SDK_JOURNAL, `${line}\n`);
  }
}

function greet(ctx, name) {
  return `hello ${name}`;
}

function square(ctx, n) {
  return n * n;
}

function stamp(ctx) {
  return Date.now();
}

function* fanOut(ctx, n) {
  const local = [];
  const remote = [];
  for (let i = 0; i < n; i++) local.push(yield* ctx.beginRun(square, i));
  for (let i = 0; i < n; i++) remote.push(yield* ctx.beginRpc("square", i, ctx.options({ target: group })));
  let localSum = 0;
  let remoteSum = 0;
  for (const future of local) localSum += yield* future;
  for (const future of remote) remoteSum += yield* future;
  return { local: localSum, remote: remoteSum };
}

function* napper(ctx, seconds) {
  const before = yield* ctx.run(stamp);
  yield* ctx.sleep(seconds * 1000);
  const after = yield* ctx.run(stamp);
  return { before, after };
}

// The token is passed explicitly: @resonatehq/sdk 0.11.5 reads RESONATE_TOKEN from the environment for
// POST / but not for its SSE stream, which then gets 401 forever (see README, "The released SDKs").
const resonate = new Resonate({
  url,
  group: mode === "worker" ? group : `${group}-client`,
  token: process.env.RESONATE_TOKEN || undefined,
});
resonate.register("greet", greet);
resonate.register("square", square);
resonate.register("stamp", stamp);
resonate.register("fanOut", fanOut);
resonate.register("napper", napper);
const toGroup = resonate.options({ target: group });

async function client() {
  switch (mode) {
    case "hello":
      return {
        run: await resonate.run(`${id}-run`, greet, "run"),
        rpc: await resonate.rpc(`${id}-rpc`, "greet", "rpc", toGroup),
      };
    case "fanout":
      return await resonate.rpc(id, "fanOut", Number(arg), toGroup);
    case "sleep":
      return await resonate.rpc(id, "napper", Number(arg), toGroup);
    default:
      throw new Error(`unknown mode ${mode}`);
  }
}

if (mode === "worker") {
  journal("worker-ready", group);
  process.on("SIGTERM", async () => {
    await resonate.stop();
    process.exit(0);
  });
} else {
  const answer = await client();
  console.log(JSON.stringify(answer));
  await resonate.stop();
  process.exit(0);
}
