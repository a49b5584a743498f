// The JSON shape of kubelet's configuration file, as assets/gen-kubelet-schema.ts reads it from
// kubelet's Go types (src/kube/gen/kubelet-config-shape.ts), and a check of a value against it:
// every field name kubelet's decoder knows, and the JSON kind each takes. What kubelet judges
// beyond the kind (a range, a policy name) it still judges when it loads the file.

/**
 * scalar: a type that decodes itself from a string or a number (a duration such as 10s, a
 * quantity such as 100Mi); any: whatever JSON.
 */
export type KubeletShape =
  | { kind: 'bool' | 'int' | 'number' | 'string' | 'scalar' | 'any' }
  | { kind: 'object'; fields: Record<string, KubeletShape> }
  | { kind: 'map'; values: KubeletShape }
  | { kind: 'list'; items: KubeletShape };

export interface ShapeProblem {
  /** Where, below the value checked (keys and list indexes). */
  path: (string | number)[];
  message: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

const EXPECTED: Record<string, string> = {
  bool: 'true or false',
  int: 'a whole number',
  number: 'a number',
  string: 'a string',
  scalar: 'a string or a number (such as 10s or 100Mi)',
  object: 'an object',
  map: 'an object (name: value)',
  list: 'a list',
};

/** Every place where `value` does not fit `shape`, at most `limit` of them. */
export function shapeProblems(value: unknown, shape: KubeletShape, limit = 10): ShapeProblem[] {
  const out: ShapeProblem[] = [];
  const visit = (v: unknown, s: KubeletShape, path: (string | number)[]): void => {
    if (out.length >= limit) return;
    const wrong = () => out.push({ path, message: `expected ${EXPECTED[s.kind]}, got ${JSON.stringify(v)}` });
    switch (s.kind) {
      case 'any':
        return;
      case 'bool':
        if (typeof v !== 'boolean') wrong();
        return;
      case 'int':
        if (!Number.isInteger(v)) wrong();
        return;
      case 'number':
        if (typeof v !== 'number' || !Number.isFinite(v)) wrong();
        return;
      case 'string':
        if (typeof v !== 'string') wrong();
        return;
      case 'scalar':
        if (typeof v !== 'string' && !(typeof v === 'number' && Number.isFinite(v))) wrong();
        return;
      case 'list':
        if (!Array.isArray(v)) return void wrong();
        v.forEach((item, i) => visit(item, s.items, [...path, i]));
        return;
      case 'map':
        if (!isObject(v)) return void wrong();
        for (const [k, item] of Object.entries(v)) visit(item, s.values, [...path, k]);
        return;
      case 'object':
        if (!isObject(v)) return void wrong();
        for (const [k, item] of Object.entries(v)) {
          const field = s.fields[k];
          if (field) visit(item, field, [...path, k]);
          else if (out.length < limit) {
            const near = Object.keys(s.fields).find((f) => f.toLowerCase() === k.toLowerCase());
            const hint = near ? ` (did you mean "${near}"?)` : '';
            out.push({ path: [...path, k], message: `kubelet's configuration has no field "${k}"${hint}` });
          }
        }
    }
  };
  visit(value, shape, []);
  return out;
}
