// What the client tests share: the daemon's address from the harness, the
// skip rule (exit 77 when a client package is not installed) and checks
// that say what was expected.
import assert from 'node:assert/strict';

export const SKIP = 77;

export function daemonUrl() {
  const url = process.env.MOETIER_HTTP_URL;
  if (!url) {
    console.error('MOETIER_HTTP_URL is not set: run this through tests/http/daemon_harness.py');
    process.exit(2);
  }
  return url;
}

export const apiKey = () => process.env.MOETIER_API_KEY ?? 'unused';

// The package's default export, or exit 77 when `npm install` has not run
// in tests/http/clients (deploy/setup.sh --tests does it).
export async function importOrSkip(name) {
  try {
    return (await import(name)).default;
  } catch (e) {
    if (e?.code === 'ERR_MODULE_NOT_FOUND') {
      console.log(`SKIPPED: ${name} is not installed (npm install in tests/http/clients)`);
      process.exit(SKIP);
    }
    throw e;
  }
}

// Runs named checks in order, printing each; the first failure ends the run
// with status 1. `deadlineMs` bounds the whole run so nothing hangs.
export async function runChecks(checks, deadlineMs = 45000) {
  const timer = setTimeout(() => {
    console.error(`FAIL: the checks did not finish within ${deadlineMs} ms`);
    process.exit(1);
  }, deadlineMs);
  for (const [name, check] of checks) {
    try {
      await check();
      console.log(`ok   ${name}`);
    } catch (e) {
      console.error(`FAIL ${name}: ${e?.stack ?? e}`);
      process.exit(1);
    }
  }
  clearTimeout(timer);
}

// Awaits `promise` and checks it rejects with an instance of `errorClass`
// carrying `status`; returns the error.
export async function expectError(promise, errorClass, status) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof errorClass,
              `expected ${errorClass.name}, got ${e?.constructor?.name}: ${e?.message}`);
    assert.equal(e.status, status);
    return e;
  }
  assert.fail(`expected ${errorClass.name} (${status}), but the call succeeded`);
}

export { assert };
