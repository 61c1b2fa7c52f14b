#!/usr/bin/env node
// Runs `node <args…>` on Node >= 22.12. The machine's node may be older (Debian ships
// Node 20, end-of-life): then Node 24 LTS is installed once from the npm registry into
// .tools/node24 and the command re-runs there. Used by every npm script of the project.
'use strict';
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const toolsDir = path.join(root, '.tools', 'node24');
const toolsNode = path.join(toolsDir, 'bin', 'node');

function newEnough(version) {
  const parts = version.replace(/^v/, '').split('.').map(Number);
  return parts[0] > 22 || (parts[0] === 22 && parts[1] >= 12);
}

function pickNode() {
  if (newEnough(process.versions.node)) return process.execPath;
  if (fs.existsSync(toolsNode)) return toolsNode;
  process.stderr.write(
    'node ' + process.versions.node + ' is too old; installing Node 24 LTS into .tools/node24 …\n',
  );
  execFileSync('npm', ['install', '-g', '--prefix', toolsDir, 'node@24'], {
    cwd: os.tmpdir(),
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return toolsNode;
}

const node = pickNode();
const env = Object.assign({}, process.env, {
  PATH: path.dirname(node) + path.delimiter + (process.env.PATH || ''),
});
const child = spawn(node, process.argv.slice(2), { stdio: 'inherit', env });
// Ctrl-C reaches the whole process group; stay alive until the child has shut down
// cleanly, and pass on signals sent to this process alone.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    if (child.exitCode === null) child.kill(signal);
  });
}
child.on('exit', (code, signal) => {
  process.exit(code === null ? (signal === 'SIGINT' ? 130 : 1) : code);
});
