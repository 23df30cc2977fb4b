//! kubernetes-sigs/cluster-api-operator's published example objects, exactly as its
//! documentation shows them (indentation and comments included), for the tests that check they
//! keep working unchanged: the "Installing the CoreProvider" page, the quick start's "Example API
//! Usage" and the five use cases of "Examples of API Usage" (docs/book/src of that repository at
//! v0.28.0). Secrets the examples name are not here: their published values are placeholders.

/// "Installing the CoreProvider".
pub const INSTALLING_CORE: &str = "apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  version: v1.4.3
";

/// The quick start: the latest core provider.
pub const QUICKSTART_CORE: &str = "apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
";

/// The quick start: the aws provider with its credentials Secret.
pub const QUICKSTART_AWS: &str = "---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
 name: aws
 namespace: capa-system
spec:
 version: v2.1.4
 configSecret:
   name: credentials-secret
";

/// Use case 1: the aws provider with specific controller flags.
pub const AWS_FLAGS: &str = r#"apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
 name: aws
 namespace: capa-system
spec:
 version: v2.1.4
 configSecret:
   name: aws-variables
 manager:
   # These top level controller manager flags, supported by all the providers.
   # These flags come with sensible defaults, thus requiring no or minimal
   # changes for the most common scenarios.
   metrics:
    bindAddress: ":8181"
   syncPeriod: "500s"
 fetchConfig:
   url: https://github.com/kubernetes-sigs/cluster-api-provider-aws/releases
 deployment:
   containers:
   - name: manager
     args:
      # These are controller flags that are specific to a provider; usage
      # is reserved for advanced scenarios only.
      "--awscluster-concurrency": "12"
      "--awsmachine-concurrency": "11"
"#;

/// Use case 2: the aws provider with its manager's image overridden.
pub const AWS_IMAGE: &str = r#"---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
 name: aws
 namespace: capa-system
spec:
 version: v2.1.4
 configSecret:
   name: aws-variables
 deployment:
   containers:
   - name: manager
     imageUrl: "gcr.io/myregistry/capa-controller:v2.1.4-foo"
"#;

/// Use case 3: resource limits of the control-plane provider's manager.
pub const KUBEADM_RESOURCES: &str = "---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: ControlPlaneProvider
metadata:
 name: kubeadm
 namespace: capi-kubeadm-control-plane-system
spec:
 version: v1.4.3
 configSecret: 
   name: capi-variables
 deployment:
   containers:
   - name: manager
     resources:
       limits:
         cpu: 100m
         memory: 30Mi
       requests:
         cpu: 100m
         memory: 20Mi
";

/// Use case 4: a provider from a repository that is not the default one.
pub const CUSTOM_AZURE_URL: &str = "---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
 name: myazure
 namespace: capz-system
spec:
 version: v1.9.3
 configSecret:
   name: azure-variables
 fetchConfig:
   url: https://github.com/myorg/awesome-azure-provider/releases

";

/// Use case 5: a provider by its well-known name (the default repository).
pub const VSPHERE_DEFAULT: &str = "---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
 name: vsphere
 namespace: capv-system
spec:
 version: v1.6.1
 configSecret:
   name: vsphere-variables
";
