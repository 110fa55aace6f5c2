// The KV-event subscriber the e2e tests run (kv_subscriber.py: pyzmq + msgpack, as llm-d's and
// Dynamo's indexers decode the stream), started from node.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from './harness.js';

export const HERE = dirname(fileURLToPath(import.meta.url));
// Debian's python3-zmq and python3-msgpack (scripts/setup-deps.sh) are the system Python's;
// a python3 earlier on PATH (pyenv, a venv) may not have them.
export const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

// Starts the subscriber on `endpoint` (connecting, or binding for serve --kv-events-connect);
// resolves once it has subscribed. `finish()` stops it and resolves with its messages.
export async function subscribe(endpoint, mode = 'connect') {
  const proc = spawn(PYTHON, [join(HERE, 'kv_subscriber.py'), endpoint, '25',
    ...(mode === 'bind' ? ['bind'] : [])],
    { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = ''; let err = '';
  proc.stdout.setEncoding('utf8').on('data', (d) => { out += d; });
  proc.stderr.setEncoding('utf8').on('data', (d) => { err += d; });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  for (let i = 0; i < 200 && !err.includes('ready'); i++) await sleep(25);
  assert.ok(err.includes('ready'), `subscriber did not start: ${err}`);
  await sleep(300);  // a SUB socket receives only after its subscription reached the PUB
  return {
    finish: async () => {
      proc.stdin.end('stop\n');
      await exited;
      assert.ok(out, `subscriber printed nothing: ${err}`);
      return JSON.parse(out).messages;
    },
  };
}
