// spec.workerProfiles: named sets of kubelet configuration fields (kube/worker-profiles.ts), each
// checked at config load against kubelet's own configuration shape and kctl's fields, with the
// path of what is wrong.
import { z } from 'zod';
import { kubeletValuesProblems, PROFILE_NAME } from '../../kube/worker-profiles.ts';
import { MAX, unique } from './fields.ts';

const kubeletValues = z
  .record(z.string(), z.unknown())
  .superRefine((values, ctx) => {
    for (const p of kubeletValuesProblems(values)) ctx.addIssue({ code: 'custom', message: p.message, path: p.path });
  })
  // kube-apiserver keeps the fields as written; config load checks them.
  .meta({ 'x-kubernetes-preserve-unknown-fields': true });

export const workerProfiles = z
  .array(
    z.strictObject({
      name: z.string().regex(PROFILE_NAME, 'expected a profile name such as edge-small (a DNS label)'),
      /** kubelet configuration fields (kubelet.config.k8s.io/v1beta1), laid over kctl's own. */
      values: kubeletValues,
    }),
  )
  .max(MAX.list)
  .meta({ 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['name'] })
  .refine((list) => unique(list.map((p) => p.name)), 'expected each profile name once')
  .default([]);
