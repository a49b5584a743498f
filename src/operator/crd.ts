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

/** The prefix of the anchor a kept Secret's token is bound to in the tenant (credentials.ts). */
export const KEPT_ANCHOR_PREFIX = 'kctl-kept-';

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
    // Fields kept as written (a worker profile's kubelet fields): config load checks them.
    if (k === 'additionalProperties' && (node as Schema)['x-kubernetes-preserve-unknown-fields']) continue;
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

const DNS_LABEL = '^[a-z0-9]([a-z0-9-]*[a-z0-9])?$';
const DNS_NAME = '^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$';

const quantity = { 'x-kubernetes-int-or-string': true, pattern: '^[0-9]+(\\.[0-9]+)?(m|[KMGTPE]i?)?$' };

/** CEL: the profile of a spec, its default included. */
const profileOf = (spec: string) =>
  `(has(${spec}.config) && has(${spec}.config.profile) ? ${spec}.config.profile : 'full')`;

/** The spec: the config, and how its control plane runs as pods. */
function specSchema(): Schema {
  return {
    type: 'object',
    required: ['version'],
    'x-kubernetes-validations': [
      {
        rule: `${profileOf('self')} == ${profileOf('oldSelf')}`,
        message:
          'config.profile cannot change: a full and an api-only cluster keep different keys; make a new KctlCluster',
      },
    ],
    properties: {
      version: {
        type: 'string',
        pattern: '^[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.-]+)?$',
        maxLength: 64,
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
        description: "how its API (and a full cluster's agent port) is reached from outside the management cluster",
        properties: {
          type: {
            type: 'string',
            enum: ['NodePort', 'LoadBalancer', 'ClusterIP', 'FrontDoor'],
            description:
              "the Service's type; FrontDoor: through the management cluster's front door (kctl operator door), by the name <metadata.name>.<its domain>",
          },
          address: {
            type: 'string',
            maxLength: 45,
            description:
              "the IP address clients and nodes use (a virtual IP, a load balancer's); default a management node's InternalIP (NodePort) or the Service's own",
            'x-kubernetes-validations': [{ rule: 'isIP(self)', message: 'expected an IP address' }],
          },
          nodePort: { type: 'integer', minimum: 30000, maximum: 32767, description: "the API's node port" },
          agentNodePort: {
            type: 'integer',
            minimum: 30000,
            maximum: 32767,
            description: "a full cluster's konnectivity agent port, as a node port",
          },
        },
        'x-kubernetes-validations': [
          {
            rule: "!has(self.address) || !has(self.type) || self.type != 'FrontDoor'",
            message: "address is the door's for type FrontDoor (kctl operator run --front-door-address)",
          },
          {
            rule: "!has(self.nodePort) || !has(self.type) || self.type == 'NodePort'",
            message: 'nodePort is for type NodePort',
          },
          {
            rule: "!has(self.agentNodePort) || !has(self.type) || self.type == 'NodePort'",
            message: 'agentNodePort is for type NodePort',
          },
          {
            rule: '!has(self.nodePort) || !has(self.agentNodePort) || self.nodePort != self.agentNodePort',
            message: 'nodePort and agentNodePort must differ',
          },
        ],
      },
      serviceAccounts: {
        type: 'array',
        maxItems: 20,
        description:
          "tenant service accounts whose credentials the operator keeps in this namespace, as a kubeconfig Secret renewed before it expires, for programs on the management cluster that use the tenant's API",
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['secretName'],
        items: {
          type: 'object',
          required: ['namespace', 'name', 'secretName'],
          properties: {
            namespace: {
              type: 'string',
              maxLength: 63,
              pattern: DNS_LABEL,
              description: "the account's namespace in the tenant",
            },
            name: {
              type: 'string',
              maxLength: 253,
              pattern: DNS_NAME,
              description: 'the service account (made when missing)',
            },
            secretName: {
              type: 'string',
              // Its anchor in the tenant is kctl-kept-<secretName>, a Secret name too (253 at most).
              maxLength: 253 - KEPT_ANCHOR_PREFIX.length,
              pattern: DNS_NAME,
              description: 'the Secret here that holds its kubeconfig (keys kubeconfig, token, ca.crt, namespace)',
            },
          },
        },
      },
      resources: {
        type: 'object',
        description:
          "each control-plane pod's requests and limits (cpu, memory); default: requests of cpu 100m and memory 320Mi for a full cluster, 50m and 200Mi for an api-only one",
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
      kubernetesVersion: { type: 'string', description: 'the Kubernetes version its kube-apiserver runs now' },
      nodes: { type: 'integer', description: 'nodes joined (a full cluster)' },
      nodesReady: { type: 'integer', description: 'of them, Ready' },
      replicas: { type: 'integer', description: 'control-plane pods its spec asks for' },
      readyReplicas: { type: 'integer', description: 'of them, ready' },
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
            { name: 'Kubernetes', type: 'string', jsonPath: '.status.kubernetesVersion', priority: 1 },
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
