// What a test run's failures said, short enough for the tail of a log (see run.ts).

/**
 * The spec reporter's closing "failing tests" section of one run, without stack frames, at most
 * 60 lines: a run that failed before it could report says so with its last lines instead.
 */
export function failureSummary(name: string, output: string): string {
  const at = output.lastIndexOf('✖ failing tests:');
  const lines = (at >= 0 ? output.slice(at) : output.split('\n').slice(-20).join('\n'))
    .split('\n')
    .filter((l) => !/^\s+at /.test(l))
    .map((l) => (l.length > 400 ? `${l.slice(0, 400)} …` : l));
  const shown = lines.length > 60 ? [...lines.slice(0, 60), `… ${lines.length - 60} more lines left out`] : lines;
  return `## ${name}${at >= 0 ? '' : ' (no failing-tests section; its last lines)'}:\n${shown.join('\n')}`;
}
