package dockerapi

// The Engine API's objects, reduced to the fields xmode sets or reads.
// Field names are the API's (https://docs.docker.com/reference/api/engine/);
// fields a create request may leave out are omitempty, so the daemon sees
// them absent and applies its defaults.

// ContainerConfig is a container's configuration (POST /containers/create,
// and Config in the inspect answer).
type ContainerConfig struct {
	Image      string            `json:"Image,omitempty"`
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// HostConfig is how the daemon runs a container. The API inlines the
// resource limits (NanoCpus, Memory, …) into it.
type HostConfig struct {
	Mounts         []Mount           `json:"Mounts,omitempty"`
	NetworkMode    string            `json:"NetworkMode,omitempty"`
	RestartPolicy  RestartPolicy     `json:"RestartPolicy"`
	CapAdd         []string          `json:"CapAdd,omitempty"`
	CapDrop        []string          `json:"CapDrop,omitempty"`
	SecurityOpt    []string          `json:"SecurityOpt,omitempty"`
	ReadonlyRootfs bool              `json:"ReadonlyRootfs,omitempty"`
	IpcMode        string            `json:"IpcMode,omitempty"`
	Tmpfs          map[string]string `json:"Tmpfs,omitempty"`
	Init           *bool             `json:"Init,omitempty"`

	NanoCPUs   int64     `json:"NanoCpus,omitempty"`
	Memory     int64     `json:"Memory,omitempty"`
	MemorySwap int64     `json:"MemorySwap,omitempty"`
	PidsLimit  *int64    `json:"PidsLimit,omitempty"`
	Ulimits    []*Ulimit `json:"Ulimits,omitempty"`

	// Read from inspect answers only (xmode never sets them).
	Privileged bool   `json:"Privileged,omitempty"`
	PidMode    string `json:"PidMode,omitempty"`
}

// RestartPolicy is HostConfig.RestartPolicy; Name "no" is none.
type RestartPolicy struct {
	Name              string `json:"Name"`
	MaximumRetryCount int    `json:"MaximumRetryCount,omitempty"`
}

// Ulimit is one resource limit (HostConfig.Ulimits).
type Ulimit struct {
	Name string `json:"Name"`
	Soft int64  `json:"Soft"`
	Hard int64  `json:"Hard"`
}

// Mount types.
const (
	MountTypeBind   = "bind"
	MountTypeVolume = "volume"
	MountTypeTmpfs  = "tmpfs"
)

// Mount is one entry of HostConfig.Mounts.
type Mount struct {
	Type          string         `json:"Type,omitempty"`
	Source        string         `json:"Source,omitempty"`
	Target        string         `json:"Target,omitempty"`
	ReadOnly      bool           `json:"ReadOnly,omitempty"`
	VolumeOptions *VolumeOptions `json:"VolumeOptions,omitempty"`
}

// VolumeOptions are a volume mount's options. Subpath needs API 1.45.
type VolumeOptions struct {
	NoCopy  bool   `json:"NoCopy,omitempty"`
	Subpath string `json:"Subpath,omitempty"`
}

// CreateResponse is the answer to a container create.
type CreateResponse struct {
	ID       string   `json:"Id"`
	Warnings []string `json:"Warnings"`
}

// ContainerState is State in the inspect answer.
type ContainerState struct {
	Status     string `json:"Status"` // created, running, paused, restarting, removing, exited, dead
	Running    bool   `json:"Running"`
	Paused     bool   `json:"Paused"`
	Restarting bool   `json:"Restarting"`
	OOMKilled  bool   `json:"OOMKilled"`
	Dead       bool   `json:"Dead"`
	Pid        int    `json:"Pid"`
	ExitCode   int    `json:"ExitCode"`
	Error      string `json:"Error"`
}

// MountPoint is one entry of Mounts in the inspect answer.
type MountPoint struct {
	Type        string `json:"Type"`
	Name        string `json:"Name"`
	Source      string `json:"Source"`
	Destination string `json:"Destination"`
	Driver      string `json:"Driver"`
	RW          bool   `json:"RW"`
}

// ContainerJSON is the answer to GET /containers/{id}/json.
type ContainerJSON struct {
	ID         string           `json:"Id"`
	Name       string           `json:"Name"` // with a leading "/"
	Image      string           `json:"Image"`
	State      *ContainerState  `json:"State"`
	Config     *ContainerConfig `json:"Config"`
	HostConfig *HostConfig      `json:"HostConfig"`
	Mounts     []MountPoint     `json:"Mounts"`
}

// ContainerSummary is one entry of GET /containers/json.
type ContainerSummary struct {
	ID      string            `json:"Id"`
	Names   []string          `json:"Names"`
	Image   string            `json:"Image"`
	State   string            `json:"State"`
	Status  string            `json:"Status"`
	Created int64             `json:"Created"` // Unix seconds
	Labels  map[string]string `json:"Labels"`
}

// TopResponse is the answer to GET /containers/{id}/top (ps on the
// daemon's host).
type TopResponse struct {
	Titles    []string   `json:"Titles"`
	Processes [][]string `json:"Processes"`
}

// ExecConfig is the body of POST /containers/{id}/exec.
type ExecConfig struct {
	User         string   `json:"User,omitempty"`
	AttachStdin  bool     `json:"AttachStdin,omitempty"`
	AttachStdout bool     `json:"AttachStdout,omitempty"`
	AttachStderr bool     `json:"AttachStderr,omitempty"`
	Env          []string `json:"Env,omitempty"`
	WorkingDir   string   `json:"WorkingDir,omitempty"`
	Cmd          []string `json:"Cmd"`
}

// ExecInspect is the answer to GET /exec/{id}/json.
type ExecInspect struct {
	ID          string `json:"ID"`
	ContainerID string `json:"ContainerID"`
	Running     bool   `json:"Running"`
	ExitCode    int    `json:"ExitCode"` // null (0) while running
	Pid         int    `json:"Pid"`      // 0 until the runtime started it
}

// Volume is a named volume.
type Volume struct {
	Name       string            `json:"Name"`
	Driver     string            `json:"Driver"`
	Mountpoint string            `json:"Mountpoint"` // on the daemon's host
	Labels     map[string]string `json:"Labels"`
	Options    map[string]string `json:"Options"` // the driver options it was created with
	Scope      string            `json:"Scope"`
	CreatedAt  string            `json:"CreatedAt"`
}

// VolumeCreateRequest is the body of POST /volumes/create.
type VolumeCreateRequest struct {
	Name       string            `json:"Name,omitempty"`
	Driver     string            `json:"Driver,omitempty"`
	DriverOpts map[string]string `json:"DriverOpts,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// ImageInspect is the part of GET /images/{name}/json xmode reads.
type ImageInspect struct {
	ID       string   `json:"Id"`
	RepoTags []string `json:"RepoTags"`
	Config   *struct {
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
}

// Event is one message of GET /events.
type Event struct {
	Type   string `json:"Type"`   // container, image, volume, network, daemon, …
	Action string `json:"Action"` // create, start, die, oom, exec_start: …, exec_die, …
	Actor  struct {
		ID         string            `json:"ID"`
		Attributes map[string]string `json:"Attributes"`
	} `json:"Actor"`
	Scope    string `json:"scope"`
	Time     int64  `json:"time"`
	TimeNano int64  `json:"timeNano"`
}

// JSONMessage is one message of a JSON progress stream (an image pull).
// A message with Error (or ErrorDetail) is the operation failing.
type JSONMessage struct {
	ID       string `json:"id,omitempty"`
	Status   string `json:"status,omitempty"`
	Progress string `json:"progress,omitempty"` // rendered by the daemon
	// ProgressDetail is present (maybe empty) on a layer's messages.
	ProgressDetail *struct {
		Current int64 `json:"current,omitempty"`
		Total   int64 `json:"total,omitempty"`
	} `json:"progressDetail,omitempty"`
	Stream      string `json:"stream,omitempty"`
	Error       string `json:"error,omitempty"`
	ErrorDetail *struct {
		Code    int    `json:"code,omitempty"`
		Message string `json:"message,omitempty"`
	} `json:"errorDetail,omitempty"`
}

// Filters are the filters of a list or events request: each key with the
// values any of which must match ("label": {"a=b", "c"}).
type Filters map[string][]string
