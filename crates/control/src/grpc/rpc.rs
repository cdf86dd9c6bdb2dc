//! The `skua.control.v1.Control` trait: one line per RPC, naming the resource module that
//! handles it (`service/<resource>.rs`).

use tonic::{Request, Response, Status};

use crate::pb;
use crate::service::{Code, Error};

/// A refusal as a gRPC status: the same code, the same message.
fn status(e: Error) -> Status {
    let code = match e.code() {
        Code::InvalidArgument => tonic::Code::InvalidArgument,
        Code::NotFound => tonic::Code::NotFound,
        Code::AlreadyExists => tonic::Code::AlreadyExists,
        Code::Aborted => tonic::Code::Aborted,
        Code::FailedPrecondition => tonic::Code::FailedPrecondition,
        Code::Internal => tonic::Code::Internal,
        Code::Unavailable => tonic::Code::Unavailable,
    };
    Status::new(code, e.message())
}
use crate::service::{
    ControlService, actors, api_keys, apps, connections, grants, lobbies, projects, publish, rooms, scopes, webhooks,
};

/// Implements the trait by handing each request's message to `module::handler` and wrapping
/// its reply, so the list below is the whole mapping of RPCs to handlers.
macro_rules! rpcs {
    ($($rpc:ident($req:ty) -> $reply:ty => $module:ident::$handler:ident;)+) => {
        #[tonic::async_trait]
        impl pb::control_server::Control for ControlService {
            $(
                async fn $rpc(&self, req: Request<$req>) -> Result<Response<$reply>, Status> {
                    $module::$handler(self, req.into_inner()).await.map(Response::new).map_err(status)
                }
            )+
        }
    };
}

rpcs! {
    create_project(pb::CreateProjectRequest) -> pb::Project => projects::create;
    get_project(pb::GetProjectRequest) -> pb::Project => projects::get;
    list_projects(pb::ListProjectsRequest) -> pb::ListProjectsResponse => projects::list;
    update_project(pb::UpdateProjectRequest) -> pb::Project => projects::update;
    delete_project(pb::DeleteProjectRequest) -> pb::DeleteResponse => projects::delete;

    create_app(pb::CreateAppRequest) -> pb::App => apps::create;
    get_app(pb::GetAppRequest) -> pb::App => apps::get;
    list_apps(pb::ListAppsRequest) -> pb::ListAppsResponse => apps::list;
    update_app(pb::UpdateAppRequest) -> pb::App => apps::update;
    delete_app(pb::DeleteAppRequest) -> pb::DeleteResponse => apps::delete;
    rotate_webhook_secret(pb::RotateWebhookSecretRequest) -> pb::App => apps::rotate_webhook_secret;
    rotate_wake_secret(pb::RotateWakeSecretRequest) -> pb::Project => projects::rotate_wake_secret;

    create_room(pb::CreateRoomRequest) -> pb::Room => rooms::create;
    ensure_room(pb::EnsureRoomRequest) -> pb::EnsureRoomResponse => rooms::ensure;
    get_room(pb::GetRoomRequest) -> pb::Room => rooms::get;
    list_rooms(pb::ListRoomsRequest) -> pb::ListRoomsResponse => rooms::list;
    update_room(pb::UpdateRoomRequest) -> pb::Room => rooms::update;
    delete_room(pb::DeleteRoomRequest) -> pb::DeleteResponse => rooms::delete;

    create_actor(pb::CreateActorRequest) -> pb::CreateActorResponse => actors::create;
    get_actor(pb::GetActorRequest) -> pb::Actor => actors::get;
    list_actors(pb::ListActorsRequest) -> pb::ListActorsResponse => actors::list;
    deactivate_actor(pb::ActorRef) -> pb::Actor => actors::deactivate;
    activate_actor(pb::ActorRef) -> pb::Actor => actors::activate;
    delete_actor(pb::ActorRef) -> pb::DeleteResponse => actors::delete;
    rotate_actor_token(pb::ActorRef) -> pb::CreateActorResponse => actors::rotate_token;

    create_grant(pb::CreateGrantRequest) -> pb::Grant => grants::create;
    list_grants(pb::ListGrantsRequest) -> pb::ListGrantsResponse => grants::list;
    delete_grant(pb::DeleteGrantRequest) -> pb::DeleteResponse => grants::delete;

    create_lobby(pb::CreateLobbyRequest) -> pb::Lobby => lobbies::create;
    get_lobby(pb::GetLobbyRequest) -> pb::Lobby => lobbies::get;
    list_lobbies(pb::ListLobbiesRequest) -> pb::ListLobbiesResponse => lobbies::list;
    set_lobby_rooms(pb::SetLobbyRoomsRequest) -> pb::Lobby => lobbies::set_rooms;
    delete_lobby(pb::DeleteLobbyRequest) -> pb::DeleteResponse => lobbies::delete;

    publish(pb::PublishRequest) -> pb::PublishResponse => publish::publish;

    list_connections(pb::ListConnectionsRequest) -> pb::ListConnectionsResponse => connections::list;
    disconnect_actor(pb::ActorRef) -> pb::DisconnectActorResponse => connections::disconnect_actor;

    create_api_key(pb::CreateApiKeyRequest) -> pb::CreateApiKeyResponse => api_keys::create;
    list_api_keys(pb::ListApiKeysRequest) -> pb::ListApiKeysResponse => api_keys::list;
    revoke_api_key(pb::RevokeApiKeyRequest) -> pb::DeleteResponse => api_keys::revoke;

    create_scope(pb::CreateScopeRequest) -> pb::Scope => scopes::create;
    get_scope(pb::ScopeRef) -> pb::Scope => scopes::get;
    list_scopes(pb::ListScopesRequest) -> pb::ListScopesResponse => scopes::list;
    update_scope(pb::UpdateScopeRequest) -> pb::Scope => scopes::update;
    delete_scope(pb::ScopeRef) -> pb::DeleteResponse => scopes::delete;
    set_actor_scope(pb::SetActorScopeRequest) -> pb::Actor => scopes::set_actor_scope;
    list_webhook_failures(pb::ListWebhookFailuresRequest) -> pb::ListWebhookFailuresResponse => webhooks::list_failures;
    retry_webhook_failures(pb::RetryWebhookFailuresRequest) -> pb::RetryWebhookFailuresResponse => webhooks::retry_failures;
    purge_webhook_failures(pb::PurgeWebhookFailuresRequest) -> pb::PurgeWebhookFailuresResponse => webhooks::purge_failures;
}
