// kctl's multi-call Kubernetes binary: kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet, kube-proxy and kubectl in one executable, chosen by the name it
// is run as (argv[0]), as upstream's hyperkube once did. The six share most of their code,
// so one binary is a third of their combined size; each entry point below is the body of
// that component's own main package at the pinned version. build-components.ts copies this
// file into the prepared Kubernetes module and stages one hard link per component name.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	_ "time/tzdata" // CronJob time zones (kube-apiserver, kube-controller-manager)

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's auth plugins
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	name := filepath.Base(os.Args[0])
	switch name {
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kube-proxy":
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	case "kubectl":
		// As cmd/kubectl: verbosity before the command is built, errors printed kubectl's way.
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "%s: run this as kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy or kubectl (a link with that name)\n", name)
		os.Exit(2)
	}
}
