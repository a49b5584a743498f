// The KctlCluster resource (kctl.dev/v1alpha1): a cluster whose control plane runs as pods on a
// management cluster, as an object. Its `spec.config` is ClusterConfig's spec, made from the one
// schema kctl loads config files with (controller/config), not a copy: the same fields, enums,
// bounds and patterns, and the CEL rules its field types carry (config/fields.ts), so
// kube-apiserver refuses a bad object with the field's path. What kube-apiserver cannot check
// (cross-field rules such as a Service network inside the pod network) the operator reports in
// the object's status. The rest of the spec is what running it as pods needs.
import { z } from 'zod';
import { clusterConfigSchema } from '../controller/config/config.ts';

export const KCTL_CLUSTER = {
  group: 'kctl.dev',
  version: 'v1alpha1',
  kind: 'KctlCluster',
  plural: 'kctlclusters',
  singular: 'kctlcluster',
  shortNames: ['kc'],
} as const;

type Schema = Record<string, unknown>;

/**
 * A JSON Schema from zod made into a CRD's structural schema: no defaults (an object keeps what
 * its author wrote; config load applies the defaults, as for a file), no `additionalProperties:
 * false` beside `properties` (kube-apiserver prunes or, under strict field validation, refuses
 * unknown fields itself), no keywords a CRD does not take.
 */
export function structural(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(structural);
  if (node === null || typeof node !== 'object') return node;
  const out: Schema = {};
  for (const [k, v] of Object.entries(node as Schema)) {
    if (k === '$schema' || k === 'default' || k === 'propertyNames') continue;
    if (k === 'additionalProperties' && v === false) continue;
    if (k === 'const') {
      out.enum = [v];
      continue;
    }
    // A map of names (extraArgs) keeps its value schema; properties are schemas by name.
    out[k] = k === 'properties' ? mapValues(v as Schema, structural) : structural(v);
  }
  return out;
}

const mapValues = (o: Schema, fn: (v: unknown) => unknown): Schema =>
  Object.fromEntries(Object.entries(o).map(([k, v]) => [k, fn(v)]));

/** ClusterConfig's spec as the CRD's `spec.config`. */
export function configSpecSchema(): Schema {
  const json = z.toJSONSchema(clusterConfigSchema, { io: 'input', unrepresentable: 'any' }) as Schema;
  const spec = (json.properties as Schema).spec;
  return structural(spec) as Schema;
}

const quantity = { 'x-kubernetes-int-or-string': true, pattern: '^[0-9]+(\\.[0-9]+)?(m|[KMGTPE]i?)?$' };

/** The spec: the config, and how its control plane runs as pods. */
function specSchema(): Schema {
  return {
    type: 'object',
    required: ['version'],
    properties: {
      version: {
        type: 'string',
        pattern: '^[0-9]+\\.[0-9]+\\.[0-9]+$',
        description: 'the kctl version its control plane runs (the kctl image of that version)',
      },
      replicas: {
        type: 'integer',
        minimum: 1,
        maximum: 7,
        description: 'control-plane pods; HA from the leases, no load balancer',
      },
      config: { ...configSpecSchema(), description: "ClusterConfig's spec: the same fields as a config file" },
      datastore: {
        type: 'object',
        description: 'where its data lives: a database and role of its own on a PostgreSQL the named Secret reaches',
        properties: {
          postgres: {
            type: 'object',
            required: ['secretName'],
            properties: {
              secretName: {
                type: 'string',
                minLength: 1,
                description:
                  'a Secret in this namespace whose key dataSource is a postgres:// URL of a role that may create databases and roles',
              },
            },
          },
        },
      },
      exposure: {
        type: 'object',
        description: 'how its API is reached from outside the management cluster',
        properties: {
          type: { type: 'string', enum: ['NodePort', 'LoadBalancer', 'ClusterIP'] },
          nodePort: { type: 'integer', minimum: 30000, maximum: 32767 },
        },
        'x-kubernetes-validations': [
          { rule: "!has(self.nodePort) || self.type == 'NodePort'", message: 'nodePort is for type NodePort' },
        ],
      },
      resources: {
        type: 'object',
        description: "each control-plane pod's requests and limits (cpu, memory)",
        properties: {
          requests: { type: 'object', additionalProperties: quantity },
          limits: { type: 'object', additionalProperties: quantity },
        },
      },
    },
  };
}

/** What the operator reports. */
function statusSchema(): Schema {
  const condition = {
    type: 'object',
    required: ['type', 'status'],
    properties: {
      type: { type: 'string' },
      status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
      reason: { type: 'string' },
      message: { type: 'string' },
      lastTransitionTime: { type: 'string', format: 'date-time' },
      observedGeneration: { type: 'integer' },
    },
  };
  return {
    type: 'object',
    properties: {
      conditions: {
        type: 'array',
        items: condition,
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['type'],
      },
      observedGeneration: { type: 'integer' },
      endpoint: { type: 'string', description: "the API's URL from outside" },
      version: { type: 'string', description: 'the kctl version its control plane runs now' },
      nodes: { type: 'integer', description: 'nodes joined' },
      caNotAfter: { type: 'string', format: 'date-time', description: "the cluster CA's expiry" },
      kubeconfigSecret: { type: 'string', description: 'the Secret in this namespace holding its admin kubeconfig' },
    },
  };
}

/** The CustomResourceDefinition, as `kctl operator crd` prints it. */
export function kctlClusterCrd(): Schema {
  const { group, version, kind, plural, singular, shortNames } = KCTL_CLUSTER;
  const ready = '.status.conditions[?(@.type=="Ready")].status';
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${group}` },
    spec: {
      group,
      scope: 'Namespaced',
      names: { kind, plural, singular, shortNames: [...shortNames], listKind: `${kind}List` },
      versions: [
        {
          name: version,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: 'Ready', type: 'string', jsonPath: ready },
            { name: 'Profile', type: 'string', jsonPath: '.spec.config.profile' },
            { name: 'Version', type: 'string', jsonPath: '.status.version' },
            { name: 'Nodes', type: 'integer', jsonPath: '.status.nodes' },
            { name: 'Endpoint', type: 'string', jsonPath: '.status.endpoint' },
            { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
          ],
          schema: {
            openAPIV3Schema: {
              type: 'object',
              required: ['spec'],
              properties: { spec: specSchema(), status: statusSchema() },
            },
          },
        },
      ],
    },
  };
}
