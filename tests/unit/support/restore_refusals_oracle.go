// The real kubelet's answer to each generated cpu_manager_state file (tests/unit/support/restore_refusals.py).
//
// Built against one k8s.io/kubernetes release by restore_refusals_record.sh; not part of the test suite's run. It
// reads {"cases": [{"name": ..., "content": ...}]} on stdin and, for each case, writes content as cpu_manager_state
// into a directory of its own and calls the kubelet's state.NewCheckpointState there with the policy "static": the
// function the CPU manager's Start calls, with the restore and its wrapped refusal. It prints a JSON object of case
// name to the error text ("" when the file restored), the directory's path replaced by {dir}.
//
//	restore_refusals_oracle -gates PodLevelResourceManagers=true,InPlacePodVerticalScalingExclusiveCPUs=true
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
)

type input struct {
	Cases []struct {
		Name    string `json:"name"`
		Content string `json:"content"`
	} `json:"cases"`
}

func main() {
	gates := flag.String("gates", "", "feature gates, NAME=BOOL[,NAME=BOOL...]")
	flag.Parse()
	if *gates != "" {
		set := map[string]bool{}
		for _, pair := range strings.Split(*gates, ",") {
			name, value, _ := strings.Cut(pair, "=")
			on, err := strconv.ParseBool(value)
			if err != nil {
				fail(fmt.Errorf("gate %q: %w", pair, err))
			}
			set[name] = on
		}
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(set); err != nil {
			fail(err)
		}
	}
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail(err)
	}
	root, err := os.MkdirTemp("", "restore-refusals-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(root)
	out := map[string]string{}
	for n, c := range in.Cases {
		dir := filepath.Join(root, strconv.Itoa(n))
		if err := os.Mkdir(dir, 0o700); err != nil {
			fail(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu_manager_state"), []byte(c.Content), 0o600); err != nil {
			fail(err)
		}
		_, err := state.NewCheckpointState(logr.Discard(), dir, "cpu_manager_state", "static",
			containermap.NewContainerMap())
		text := ""
		if err != nil {
			text = strings.ReplaceAll(err.Error(), dir, "{dir}")
		}
		if _, seen := out[c.Name]; seen {
			fail(fmt.Errorf("case %q twice", c.Name))
		}
		out[c.Name] = text
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "restore_refusals_oracle:", err)
	os.Exit(1)
}
