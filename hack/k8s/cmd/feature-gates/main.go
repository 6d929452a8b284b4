// Command feature-gates prints the feature gates the kubelet of this
// module's k8s.io/kubernetes version accepts in --feature-gates and the
// featureGates field, as its own registry holds them at its emulation
// version (hack/feature-gates.sh turns the output into
// crates/kubelet-core/src/config/feature_gates.tsv):
//
//	name  default  locked  stage  kubelet  dependencies
//
// stage: ALPHA, BETA, GA, DEPRECATED or PRE-ALPHA; kubelet: whether the
// kubelet's own code (cmd/kubelet, pkg/kubelet, pkg/volume) reads the
// gate; dependencies: the gates it needs enabled, comma-separated.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/kubernetes/pkg/features"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: feature-gates K8S_MODULE_DIR")
		os.Exit(2)
	}
	// As cmd/kubelet/app/server.go does.
	if err := logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate); err != nil {
		panic(err)
	}
	read := readByKubelet(os.Args[1])
	gates := utilfeature.DefaultMutableFeatureGate.GetAll()
	deps := utilfeature.DefaultMutableFeatureGate.Dependencies()
	names := make([]string, 0, len(gates))
	for name := range gates {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		spec := gates[featuregate.Feature(name)]
		stage := string(spec.PreRelease)
		if stage == "" {
			stage = "GA"
		}
		var needs []string
		for _, d := range deps[featuregate.Feature(name)] {
			needs = append(needs, string(d))
		}
		sort.Strings(needs)
		fmt.Printf("%s\t%t\t%t\t%s\t%t\t%s\n", name, spec.Default, spec.LockToDefault, stage, read[name], strings.Join(needs, ","))
	}
}

// The gates the kubelet's own packages read (features.X, genericfeatures.X,
// ... in non-test Go files).
func readByKubelet(root string) map[string]bool {
	ref := regexp.MustCompile(`\b(?:features|genericfeatures|kubefeatures|utilfeatures|clientfeatures|logsapi)\.([A-Z][A-Za-z0-9]+)\b`)
	read := map[string]bool{}
	for _, dir := range []string{"cmd/kubelet", "pkg/kubelet", "pkg/volume"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			text, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range ref.FindAllSubmatch(text, -1) {
				read[string(m[1])] = true
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	return read
}
