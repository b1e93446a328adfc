//! The generated protobuf types: the CRI's `runtime.v1` and the few
//! containerd services the client calls. They never leave `runtime::cri`.

pub mod api {
    include!(concat!(env!("OUT_DIR"), "/api.rs"));
}
pub mod api_grpc {
    include!(concat!(env!("OUT_DIR"), "/api_grpc.rs"));
}
/// containerd's content service (`ListStatuses` only)
pub mod containerd {
    pub mod api {
        include!(concat!(env!("OUT_DIR"), "/containerd/api.rs"));
    }
    pub mod api_grpc {
        include!(concat!(env!("OUT_DIR"), "/containerd/api_grpc.rs"));
    }
}
/// containerd's event service (`Subscribe` only)
pub mod containerd_events {
    pub mod api {
        include!(concat!(env!("OUT_DIR"), "/containerd_events/api.rs"));
    }
    pub mod api_grpc {
        include!(concat!(env!("OUT_DIR"), "/containerd_events/api_grpc.rs"));
    }
}
/// containerd's task service (`Get` only)
pub mod containerd_tasks {
    pub mod api {
        include!(concat!(env!("OUT_DIR"), "/containerd_tasks/api.rs"));
    }
    pub mod api_grpc {
        include!(concat!(env!("OUT_DIR"), "/containerd_tasks/api_grpc.rs"));
    }
}
