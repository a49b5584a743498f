// klog's command-line flags, which every upstream Go component accepts (proxy-agent and
// proxy-server among them): kctl takes them so upstream command lines run unchanged, and acts
// only on -v (5 and above: debug logs).
import type { FlagSpec } from './pflag.ts';

const KLOG = 'kctl logs JSON lines to stderr; klog output settings do not apply';

export const KLOG_FLAGS: readonly FlagSpec[] = [
  {
    name: 'add-dir-header',
    kind: 'bool',
    default: 'false',
    help: 'If true, adds the file directory to the header of the log messages',
    inert: KLOG,
  },
  {
    name: 'alsologtostderr',
    kind: 'bool',
    default: 'false',
    help: 'log to standard error as well as files (no effect when -logtostderr=true)',
    inert: KLOG,
  },
  {
    name: 'alsologtostderrthreshold',
    kind: 'severity',
    default: '',
    help: 'logs at or above this threshold go to stderr when -alsologtostderr=true (no effect when -logtostderr=true)',
    inert: KLOG,
  },
  {
    name: 'legacy-stderr-threshold-behavior',
    kind: 'bool',
    default: 'true',
    help: 'If true, stderrthreshold is ignored when logtostderr=true (legacy behavior). If false, stderrthreshold is honored even when logtostderr=true',
    inert: KLOG,
  },
  {
    name: 'log-backtrace-at',
    kind: 'traceLocation',
    default: ':0',
    help: 'when logging hits line file:N, emit a stack trace',
    inert: KLOG,
  },
  {
    name: 'log-dir',
    kind: 'string',
    default: '',
    help: 'If non-empty, write log files in this directory (no effect when -logtostderr=true)',
    inert: KLOG,
  },
  {
    name: 'log-file',
    kind: 'string',
    default: '',
    help: 'If non-empty, use this log file (no effect when -logtostderr=true)',
    inert: KLOG,
  },
  {
    name: 'log-file-max-size',
    kind: 'uint',
    default: '1800',
    help: 'Defines the maximum size a log file can grow to (no effect when -logtostderr=true). Unit is megabytes. If the value is 0, the maximum file size is unlimited.',
    inert: KLOG,
  },
  { name: 'logtostderr', kind: 'bool', default: 'true', help: 'log to standard error instead of files', inert: KLOG },
  {
    name: 'one-output',
    kind: 'bool',
    default: 'false',
    help: 'If true, only write logs to their native severity level (vs also writing to each lower severity level; no effect when -logtostderr=true)',
    inert: KLOG,
  },
  {
    name: 'skip-headers',
    kind: 'bool',
    default: 'false',
    help: 'If true, avoid header prefixes in the log messages',
    inert: KLOG,
  },
  {
    name: 'skip-log-headers',
    kind: 'bool',
    default: 'false',
    help: 'If true, avoid headers when opening log files (no effect when -logtostderr=true)',
    inert: KLOG,
  },
  {
    name: 'stderrthreshold',
    kind: 'severity',
    default: '2',
    help: 'logs at or above this threshold go to stderr when writing to files and stderr (no effect when -logtostderr=true or -alsologtostderr=true unless -legacy_stderr_threshold_behavior=false)',
    inert: KLOG,
  },
  {
    name: 'v',
    short: 'v',
    kind: 'level',
    default: '4',
    help: 'number for the log level verbosity (kctl: 5 and above log at debug level)',
  },
  {
    name: 'vmodule',
    kind: 'moduleSpec',
    default: '',
    help: 'comma-separated list of pattern=N settings for file-filtered logging',
    inert: KLOG,
  },
];
