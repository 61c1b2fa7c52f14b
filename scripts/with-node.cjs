#!/usr/bin/env node
// Runs `node <args…>` on Node >= 22.12. The machine's node may be older (Debian ships
// Node 20, end-of-life): then Node 24 LTS is installed once from the npm registry into
// .tools/node24 and the command re-runs there. Used by every npm script of the project.
'use strict';
const { spawnSync, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const toolsDir = path.join(root, '.tools', 'node24');
const toolsNode = path.join(toolsDir, 'bin', 'node');

function newEnough(version) {
  const [major, minor] = version.replace(/^v/, '').split('.').map(Number);
  return major > 22 || (major === 22 && minor >= 12);
}

function pickNode() {
  if (newEnough(process.versions.node)) return process.execPath;
  if (fs.existsSync(toolsNode)) return toolsNode;
  process.stderr.write(`node ${process.versions.node} is too old; installing Node 24 LTS into .tools/node24 …\n`);
  execFileSync('npm', ['install', '-g', '--prefix', toolsDir, 'node@24'], {
    cwd: require('node:os').tmpdir(),
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return toolsNode;
}

const node = pickNode();
const binDir = path.dirname(node);
const env = Object.assign({}, process.env, { PATH: binDir + path.delimiter + (process.env.PATH || '') });
const result = spawnSync(node, process.argv.slice(2), { stdio: 'inherit', env });
if (result.signal) process.kill(process.pid, result.signal);
process.exit(result.status === null ? 1 : result.status);
