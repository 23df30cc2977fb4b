// Command kstatus prints the kstatus verdict (sigs.k8s.io/cli-utils/pkg/kstatus, the rules
// Flux's health checks and `kubectl wait`-style tools apply to custom resources) of each JSON
// object on standard input, one per line: "<status>\t<message>". The tests compare it with what
// the operator's conditions mean.
package main

import (
	"bufio"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	// Decodes whole numbers as int64, as the API machinery expects of an object.
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		var obj map[string]interface{}
		if err := json.Unmarshal(in.Bytes(), &obj); err != nil {
			fmt.Fprintln(os.Stderr, "kstatus: not a JSON object:", err)
			os.Exit(2)
		}
		res, err := status.Compute(&unstructured.Unstructured{Object: obj})
		if err != nil {
			fmt.Fprintln(os.Stderr, "kstatus:", err)
			os.Exit(1)
		}
		fmt.Printf("%s\t%s\n", res.Status, res.Message)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(2)
	}
}
