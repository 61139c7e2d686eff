package deploy

// The Kubernetes and prometheus-operator objects the chart renders, as far as it
// renders them. Field names follow the API reference (k8s.io/api, monitoring.coreos.com/v1);
// decoding is strict, so a misspelt or misplaced field in a template fails the test, as
// it would fail `kubectl apply`.

type meta struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
}

type configMap struct {
	object `yaml:",inline"`
	Data   map[string]string `yaml:"data"`
}

type secret struct {
	object     `yaml:",inline"`
	Type       string            `yaml:"type"`
	StringData map[string]string `yaml:"stringData"`
}

type serviceAccount struct {
	object                       `yaml:",inline"`
	AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
}

type service struct {
	object `yaml:",inline"`
	Spec   struct {
		Type                     string            `yaml:"type"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
			Protocol   string `yaml:"protocol"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type pdb struct {
	object `yaml:",inline"`
	Spec   struct {
		MaxUnavailable *int          `yaml:"maxUnavailable"`
		MinAvailable   *int          `yaml:"minAvailable"`
		Selector       labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

type deployment struct {
	object `yaml:",inline"`
	Spec   struct {
		Replicas int `yaml:"replicas"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate *struct {
				MaxSurge       int `yaml:"maxSurge"`
				MaxUnavailable int `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Selector labelSelector `yaml:"selector"`
		Template struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	ServiceAccountName            string              `yaml:"serviceAccountName"`
	AutomountServiceAccountToken  *bool               `yaml:"automountServiceAccountToken"`
	ImagePullSecrets              []map[string]string `yaml:"imagePullSecrets"`
	PriorityClassName             string              `yaml:"priorityClassName"`
	TerminationGracePeriodSeconds *int                `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot   bool `yaml:"runAsNonRoot"`
		RunAsUser      int  `yaml:"runAsUser"`
		RunAsGroup     int  `yaml:"runAsGroup"`
		FSGroup        *int `yaml:"fsGroup"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	Containers   []container       `yaml:"containers"`
	Volumes      []volume          `yaml:"volumes"`
	NodeSelector map[string]string `yaml:"nodeSelector"`
	Tolerations  []map[string]any  `yaml:"tolerations"`
	Affinity     *struct {
		PodAntiAffinity struct {
			Preferred []struct {
				Weight          int          `yaml:"weight"`
				PodAffinityTerm affinityTerm `yaml:"podAffinityTerm"`
			} `yaml:"preferredDuringSchedulingIgnoredDuringExecution"`
			Required []affinityTerm `yaml:"requiredDuringSchedulingIgnoredDuringExecution"`
		} `yaml:"podAntiAffinity"`
	} `yaml:"affinity"`
}

type affinityTerm struct {
	TopologyKey   string        `yaml:"topologyKey"`
	LabelSelector labelSelector `yaml:"labelSelector"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Args            []string `yaml:"args"`
	Env             []struct {
		Name      string         `yaml:"name"`
		Value     string         `yaml:"value"`
		ValueFrom map[string]any `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	} `yaml:"ports"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	InitialDelaySeconds int `yaml:"initialDelaySeconds"`
	PeriodSeconds       int `yaml:"periodSeconds"`
	TimeoutSeconds      int `yaml:"timeoutSeconds"`
	FailureThreshold    int `yaml:"failureThreshold"`
}

type keyToPath struct {
	Key  string `yaml:"key"`
	Path string `yaml:"path"`
}

type volume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name  string      `yaml:"name"`
		Items []keyToPath `yaml:"items"`
	} `yaml:"configMap"`
	Secret *struct {
		SecretName  string      `yaml:"secretName"`
		DefaultMode *int        `yaml:"defaultMode"`
		Items       []keyToPath `yaml:"items"`
	} `yaml:"secret"`
	EmptyDir map[string]any `yaml:"emptyDir"`
}

type serviceMonitor struct {
	object `yaml:",inline"`
	Spec   struct {
		Selector  labelSelector `yaml:"selector"`
		Endpoints []struct {
			Port          string `yaml:"port"`
			Path          string `yaml:"path"`
			Interval      string `yaml:"interval"`
			ScrapeTimeout string `yaml:"scrapeTimeout"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type prometheusRule struct {
	object `yaml:",inline"`
	Spec   ruleFile `yaml:"spec"`
}

// ruleFile is a Prometheus rule file, which is also a PrometheusRule's spec.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}
