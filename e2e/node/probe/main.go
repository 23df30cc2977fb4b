// Command probe is the real node's test image: it checks from inside a pod what the node must
// give a pod, and reports it on stdout and over HTTPS on :8443 so the API server reaches it at
// the pod's IP (GET /report through the pods/proxy subresource; POST /validate as a validating
// admission webhook behind a Service).
//
// The report line holds the process's uid, whether its root filesystem is read-only, its memory
// cgroup's limit and the user the API server authenticated when called through the `kubernetes`
// Service (KUBERNETES_SERVICE_HOST, the ServiceAccount token and CA), i.e. through kube-proxy.
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	report := fmt.Sprintf("uid=%d rootfs=%s memory-limit=%s apiserver=%s apiserver-user=%s",
		os.Getuid(), rootfs(), memoryLimit(), apiserver(), apiserverUser())
	fmt.Println("probe:", report)
	cert, err := servingPair()
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe: serving certificate:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/report", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, report) })
	mux.HandleFunc("/validate", validate)
	server := &http.Server{Addr: ":8443", Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	fmt.Fprintln(os.Stderr, "probe:", server.ListenAndServeTLS("", ""))
	os.Exit(1)
}

// rootfs says whether writing to / fails with EROFS, as readOnlyRootFilesystem promises.
func rootfs() string {
	err := os.WriteFile("/probe-write-test", []byte("x"), 0o600)
	switch {
	case errors.Is(err, syscall.EROFS):
		return "read-only"
	case err == nil:
		return "writable"
	default:
		return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
	}
}

// memoryLimit reads the limit of the container's own memory cgroup (v1, else v2).
func memoryLimit() string {
	for _, path := range []string{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"} {
		if b, err := os.ReadFile(path); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return "unknown"
}

// apiserverUser asks the API server who the pod is (a SelfSubjectReview), retrying while the
// Service's rules may still be on their way, and returns the user name or the last error.
func apiserverUser() string {
	last := "no-attempt"
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		user, err := selfSubjectReview()
		if err == nil {
			return user
		}
		last = "error:" + strings.ReplaceAll(err.Error(), " ", "_")
		fmt.Fprintln(os.Stderr, "probe: API server not reached yet:", err)
	}
	return last
}

// apiserver is the address the kubelet gives pods for the `kubernetes` Service.
func apiserver() string {
	return net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
}

func selfSubjectReview() (string, error) {
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return "", err
	}
	caPEM, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return "", errors.New("no certificate in ca.crt")
	}
	client := &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	host := apiserver()
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	req, err := http.NewRequest(http.MethodPost, "https://"+host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &review); err != nil {
		return "", err
	}
	return review.Status.UserInfo.Username, nil
}

// validate is a validating admission webhook that denies every request it gets, saying so: the
// caller sees that the API server reached it through a Service (aggregator routing to pod IPs).
func validate(w http.ResponseWriter, r *http.Request) {
	var review struct {
		Request struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"response": map[string]any{"uid": review.Request.UID, "allowed": false,
			"status": map[string]any{"code": 403, "message": "probe webhook: denied"}},
	})
}

// servingPair is the mounted pair in /tls (tls.crt, tls.key) when there is one, for callers that
// verify it (a webhook's caBundle), else a self-signed one made in memory.
func servingPair() (tls.Certificate, error) {
	if pair, err := tls.LoadX509KeyPair("/tls/tls.crt", "/tls/tls.key"); err == nil {
		return pair, nil
	}
	return selfSigned()
}

// selfSigned makes the serving pair in memory: the root filesystem is read-only.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "probe"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
