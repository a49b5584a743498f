// `npm run conformance`: the Kubernetes conformance suite against a kctl lab cluster
// (conformance.ts; test/conformance/README.md). Exit 0 when every spec that ran passed.
//
//   npm run conformance [-- --focus REGEX] [--out DIR] [--nodes N]
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { messageOf } from '../../src/base/errors.ts';
import { runConformance } from './conformance.ts';

const { values } = parseArgs({
  options: {
    focus: { type: 'string' },
    out: { type: 'string' },
    nodes: { type: 'string', default: '4' },
  },
});
const stamp = new Date().toISOString().replace(/[:]/g, '-').slice(0, 19);
const nodes = Number(values.nodes);
if (!Number.isInteger(nodes) || nodes < 1) {
  process.stderr.write(`--nodes ${values.nodes}: give a whole number of ginkgo nodes, 1 or more\n`);
  process.exit(2);
}
runConformance({ focus: values.focus, out: resolve(values.out ?? join('conformance-results', stamp)), nodes })
  .then((r) => process.exit(r.failed.length === 0 && r.passed.length > 0 && r.exits.every((e) => e === 0) ? 0 : 1))
  .catch((err: unknown) => {
    process.stderr.write(`conformance: ${messageOf(err)}\n`);
    process.exit(1);
  });
