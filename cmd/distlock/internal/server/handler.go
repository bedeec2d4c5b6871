package server

import "github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"

// service implements the LockService's RPCs over its Server.
type service struct {
	distlockv1connect.UnimplementedLockServiceHandler
	s *Server
}
