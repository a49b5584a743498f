// `npm run gen` (run before typecheck and build): src/konnectivity/wire/konnectivity.proto ->
// src/konnectivity/wire/gen/konnectivity.ts: the TypeScript types, the encode/decode of every
// message and the grpc-js service definitions and clients. The .proto is the only source.
//
// Written here rather than with pbjs/pbts: their static code types int64 as number|Long and
// enums as numbers (what our code carries, decimal strings and names, only exists after an
// untyped toObject pass), and protobufjs 8's Writer copies a DATA payload up to three times.
// This emits exactly the types the tunnel uses over the primitives in src/konnectivity/wire/wire.ts,
// and covers the proto3 subset konnectivity needs; anything else fails here, loudly.
import { createHash } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import protobuf from 'protobufjs';

const root = new URL('..', import.meta.url).pathname;
const PROTO = 'src/konnectivity/wire/konnectivity.proto';
const OUT = 'src/konnectivity/wire/gen/konnectivity.ts';

interface Scalar {
  ts: string;
  /** proto3 default, as TS source. */
  zero: string;
  /** Condition (on `v`) under which a non-oneof field is written: proto3 leaves defaults off the wire. */
  present: (v: string) => string;
  wireType: number;
  size: (v: string) => string;
  write: (v: string) => string;
  read: string;
}

const SCALARS: Record<string, Scalar> = {
  string: {
    ts: 'string',
    zero: "''",
    present: (v) => `${v} !== ''`,
    wireType: 2,
    size: (v) => `wire.sizeString(${v})`,
    write: (v) => `w.string(${v})`,
    read: 'r.string()',
  },
  bytes: {
    ts: 'Buffer',
    zero: 'wire.NO_BYTES',
    present: (v) => `${v}.length > 0`,
    wireType: 2,
    size: (v) => `wire.sizeBytes(${v})`,
    write: (v) => `w.bytes(${v})`,
    read: 'wire.bytes(r)',
  },
  bool: {
    ts: 'boolean',
    zero: 'false',
    present: (v) => v,
    wireType: 0,
    size: () => '1',
    write: (v) => `w.varint(${v} ? 1 : 0)`,
    read: 'r.bool()',
  },
  int32: {
    ts: 'number',
    zero: '0',
    present: (v) => `${v} !== 0`,
    wireType: 0,
    size: (v) => `wire.sizeInt32(${v})`,
    write: (v) => `w.int32(${v})`,
    read: 'r.int32()',
  },
  uint32: {
    ts: 'number',
    zero: '0',
    present: (v) => `${v} !== 0`,
    wireType: 0,
    size: (v) => `wire.sizeVarint(${v})`,
    write: (v) => `w.varint(${v})`,
    read: 'r.uint32()',
  },
  int64: {
    ts: 'Int64',
    zero: "'0'",
    present: (v) => `${v} !== '0' && ${v} !== ''`,
    wireType: 0,
    size: (v) => `wire.sizeInt64(${v})`,
    write: (v) => `w.int64(${v})`,
    read: 'wire.int64String(r.int64())',
  },
  uint64: {
    ts: 'Int64',
    zero: "'0'",
    present: (v) => `${v} !== '0' && ${v} !== ''`,
    wireType: 0,
    size: (v) => `wire.sizeInt64(${v})`,
    write: (v) => `w.int64(${v})`,
    read: 'wire.int64String(r.uint64())',
  },
};

function doc(comment: string | null | undefined, indent = ''): string {
  if (!comment) return '';
  const lines = comment.replace(/\*\//g, '* /').split('\n');
  return lines.length === 1
    ? `${indent}/** ${lines[0]} */\n`
    : `${indent}/**\n${lines.map((l) => `${indent} * ${l}`.trimEnd()).join('\n')}\n${indent} */\n`;
}

function tagOf(id: number, wireType: number): number {
  return id * 8 + wireType;
}

function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function unsupported(where: string, what: string): never {
  throw new Error(`${PROTO}: ${where} uses ${what}, which assets/gen-proto.ts does not generate yet`);
}

function genEnum(e: protobuf.Enum): string {
  const entries = Object.entries(e.values);
  const zero = entries.find(([, v]) => v === 0);
  if (!zero) unsupported(e.name, 'an enum without a zero value');
  return `${doc(e.comment)}export const ${e.name} = {\n${entries.map(([k, v]) => `${doc(e.comments[k], '  ')}  ${k}: ${v},`).join('\n')}\n} as const;
/** A value name; a received value this file does not know stays a number (proto3 enums are open). */
export type ${e.name} = keyof typeof ${e.name};

const ${e.name}Names: Partial<Record<number, ${e.name}>> = { ${entries.map(([k, v]) => `${v}: '${k}'`).join(', ')} };

function ${e.name}Value(v: ${e.name} | number): number {
  return typeof v === 'number' ? v : ${e.name}[v];
}
`;
}

interface FieldPlan {
  f: protobuf.Field;
  oneof: boolean;
  scalar?: Scalar;
  enumName?: string;
  messageName?: string;
  wireType: number;
  tag: number;
  tagSize: number;
}

function planField(t: protobuf.Type, f: protobuf.Field): FieldPlan {
  const where = `${t.name}.${f.name}`;
  if (f.repeated || f.map) unsupported(where, 'a repeated or map field');
  if (f.partOf && f.partOf.name.startsWith('_') && f.partOf.fieldsArray.length === 1)
    unsupported(where, 'proto3 optional');
  const oneof = f.partOf !== null;
  const resolved = f.resolvedType;
  let plan: Omit<FieldPlan, 'tag' | 'tagSize'>;
  if (resolved instanceof protobuf.Enum) {
    if (resolved.parent !== t.root) unsupported(where, 'a nested enum');
    plan = { f, oneof, enumName: resolved.name, wireType: 0 };
  } else if (resolved instanceof protobuf.Type) {
    if (resolved.parent !== t.root) unsupported(where, 'a nested message');
    plan = { f, oneof, messageName: resolved.name, wireType: 2 };
  } else {
    const scalar = SCALARS[f.type];
    if (!scalar) unsupported(where, `type ${f.type}`);
    plan = { f, oneof, scalar, wireType: scalar.wireType };
  }
  const tag = tagOf(f.id, plan.wireType);
  return { ...plan, tag, tagSize: varintSize(tag) };
}

function tsType(p: FieldPlan): string {
  if (p.scalar) return p.scalar.ts;
  if (p.enumName) return `${p.enumName} | number`;
  return p.messageName as string;
}

/** Fields that are always present in TS: proto3 scalars outside a oneof (absent = default). */
function required(p: FieldPlan): boolean {
  return !p.oneof && p.messageName === undefined;
}

/** `top`: the message is an RPC's request or response, so it gets Buffer-level encode/decode. */
function genMessage(t: protobuf.Type, top: boolean): string {
  if (t.nestedArray.length > 0) unsupported(t.name, 'nested declarations');
  const plans = t.fieldsArray.map((f) => planField(t, f)).sort((a, b) => a.f.id - b.f.id);
  const N = t.name;
  const out: string[] = [];

  out.push(doc(t.comment));
  if (plans.length === 0) {
    out.push(`export type ${N} = Record<string, never>;\n`);
  } else {
    out.push(
      `export interface ${N} {\n${plans.map((p) => `${doc(p.f.comment, '  ')}  ${p.f.name}${required(p) ? '' : '?'}: ${tsType(p)};`).join('\n')}\n}\n`,
    );
  }

  const size: string[] = [];
  const write: string[] = [];
  const read: string[] = [];
  for (const p of plans) {
    const v = `m.${p.f.name}`;
    if (p.messageName) {
      size.push(
        `  if (${v} !== undefined) { const s = size${p.messageName}(${v}); n += ${p.tagSize} + wire.sizeVarint(s) + s; }`,
      );
      write.push(
        `  if (${v} !== undefined) { w.varint(${p.tag}); w.varint(size${p.messageName}(${v})); write${p.messageName}(w, ${v}); }`,
      );
      read.push(`      case ${p.tag}: { const len = r.uint32(); ${v} = read${p.messageName}(r, r.pos + len); break; }`);
    } else if (p.enumName) {
      const cond = p.oneof ? `${v} !== undefined` : `e !== 0`;
      const val = `${p.enumName}Value(${v})`;
      if (p.oneof) {
        size.push(`  if (${cond}) n += ${p.tagSize} + wire.sizeInt32(${val});`);
        write.push(`  if (${cond}) { w.varint(${p.tag}); w.int32(${val}); }`);
      } else {
        size.push(`  { const e = ${val}; if (${cond}) n += ${p.tagSize} + wire.sizeInt32(e); }`);
        write.push(`  { const e = ${val}; if (${cond}) { w.varint(${p.tag}); w.int32(e); } }`);
      }
      read.push(`      case ${p.tag}: { const e = r.int32(); ${v} = ${p.enumName}Names[e] ?? e; break; }`);
    } else {
      const s = p.scalar as Scalar;
      const cond = p.oneof ? `${v} !== undefined` : s.present(v);
      size.push(`  if (${cond}) n += ${p.tagSize} + ${s.size(v)};`);
      write.push(`  if (${cond}) { w.varint(${p.tag}); ${s.write(v)}; }`);
      read.push(`      case ${p.tag}: ${v} = ${s.read}; break;`);
    }
  }
  const defaults = plans
    .filter(required)
    .map((p) => `${p.f.name}: ${p.scalar ? p.scalar.zero : `'${(p.f.resolvedType as protobuf.Enum).valuesById[0]}'`}`);

  const body = (lines: string[]): string => lines.map((l) => `${l}\n`).join('');
  const [m, w] = plans.length === 0 ? ['_m', '_w'] : ['m', 'w'];
  out.push(`
function size${N}(${m}: ${N}): number {
${plans.length === 0 ? '  return 0;\n' : `  let n = 0;\n${body(size)}  return n;\n`}}

function write${N}(${w}: WireWriter, ${m}: ${N}): void {
${body(write)}}

function read${N}(r: BufferReader, end: number): ${N} {
  const m: ${N} = {${defaults.length ? ` ${defaults.join(', ')} ` : ''}};
  while (r.pos < end) {
    const tag = r.uint32();
    switch (tag) {
${body(read)}      default: r.skipType(tag & 7, 0, tag >>> 3);
    }
  }
  return m;
}
${
  top
    ? `
export function encode${N}(m: ${N}): Buffer {
  const w = new WireWriter(size${N}(m));
  write${N}(w, m);
  return w.finish();
}

export function decode${N}(b: Buffer): ${N} {
  const r = wire.newReader(b);
  return read${N}(r, r.len);
}
`
    : ''
}`);
  return out.join('');
}

function genService(s: protobuf.Service): string {
  const methods = s.methodsArray;
  const path = (m: protobuf.Method): string => `/${s.fullName.replace(/^\./, '')}/${m.name}`;
  for (const m of methods) {
    if (!m.requestStream || !m.responseStream)
      unsupported(`${s.name}.${m.name}`, 'a method that is not bidirectional streaming');
  }
  const types = (m: protobuf.Method): [string, string] => [
    m.resolvedRequestType?.name ?? m.requestType,
    m.resolvedResponseType?.name ?? m.responseType,
  ];
  return `${doc(s.comment)}export const ${s.name}Definition = {
${methods
  .map((m) => {
    const [req, rsp] = types(m);
    return `  ${m.name}: {
    path: '${path(m)}',
    requestStream: true,
    responseStream: true,
    requestSerialize: encode${req},
    requestDeserialize: decode${req},
    responseSerialize: encode${rsp},
    responseDeserialize: decode${rsp},
  },`;
  })
  .join('\n')}
} satisfies grpc.ServiceDefinition;

/** What a server implements for ${s.name} (grpc.Server.addService(${s.name}Definition, handlers)). */
export interface ${s.name}Handlers extends grpc.UntypedServiceImplementation {
${methods
  .map((m) => {
    const [req, rsp] = types(m);
    return `  ${m.name}: grpc.handleBidiStreamingCall<${req}, ${rsp}>;`;
  })
  .join('\n')}
}

export class ${s.name}Client extends grpc.Client {
${methods
  .map((m) => {
    const [req, rsp] = types(m);
    return `  ${m.name}(metadata: grpc.Metadata = new grpc.Metadata(), options?: grpc.CallOptions): grpc.ClientDuplexStream<${req}, ${rsp}> {
    return this.makeBidiStreamRequest(${s.name}Definition.${m.name}.path, encode${req}, decode${rsp}, metadata, options);
  }`;
  })
  .join('\n\n')}
}
`;
}

function generate(protoText: string): string {
  const parsed = protobuf.parse(protoText, { keepCase: true, alternateCommentMode: true });
  if (parsed.package) unsupported('the file', 'a package line');
  const r = parsed.root;
  r.resolveAll();
  const rpcTypes = new Set(
    r.nestedArray.flatMap((o) =>
      o instanceof protobuf.Service ? o.methodsArray.flatMap((m) => [m.requestType, m.responseType]) : [],
    ),
  );
  const enums: string[] = [];
  const messages: string[] = [];
  const services: string[] = [];
  for (const obj of r.nestedArray) {
    if (obj instanceof protobuf.Enum) enums.push(genEnum(obj));
    else if (obj instanceof protobuf.Type) messages.push(genMessage(obj, rpcTypes.has(obj.name)));
    else if (obj instanceof protobuf.Service) services.push(genService(obj));
    else unsupported(obj.name, 'a namespace');
  }
  const hash = createHash('sha256').update(protoText).digest('hex');
  return `// Generated by assets/gen-proto.ts from ${PROTO.split('/').pop()}: do not edit, run \`npm run gen\`.
import * as grpc from '@grpc/grpc-js';
import * as wire from '../wire.ts';
import { WireWriter, type BufferReader } from '../wire.ts';

/** sha256 of the .proto this file was generated from (a unit test compares). */
export const PROTO_SHA256 = '${hash}';

/** int64 on the wire, a decimal string here (a JS number cannot hold 63 bits). */
export type Int64 = string;

${enums.join('\n')}
${messages.join('\n')}
${services.join('\n')}`;
}

async function main(): Promise<void> {
  const text = await readFile(join(root, PROTO), 'utf8');
  const code = generate(text);
  const out = join(root, OUT);
  const old = await readFile(out, 'utf8').catch(() => '');
  if (old === code) return;
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, code);
  console.log(`gen-proto: wrote ${OUT}`);
}

await main();
