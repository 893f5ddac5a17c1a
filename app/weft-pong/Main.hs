-- | An HTTP/1.1 keep-alive server answering every request with the 42-byte
-- pong ("Example.Http"): request line and headers parsed, pipelining
-- honoured, malformed requests answered with 400 and closed, header limits
-- enforced (431). With weft, idle connections are closed after 60 s unless
-- @--idle-timeout@ says otherwise, and a request trickled in at under 1 KiB
-- per idle period does not count as activity (@--min-receive BYTES@), so
-- slow clients cannot hold connections for ever. A full server (at
-- @--max-clients N@, by default the fd limit less 32, or out of fds)
-- closes a stalled or idle keep-alive connection for a newcomer, or
-- answers the newcomer 503.
-- @--body-bytes N@ makes the body N bytes
-- long instead of 4, to compare with servers sending files of that size.
module Main (main) where

import System.Environment (getArgs, withArgs)
import System.Exit (exitFailure)
import System.IO (hPutStrLn, stderr)

import Example.Http (pongResponseOf, tooManyClientsResponse)
import Example.Serve
import Example.Servers
import qualified Weft.Net as W

main :: IO ()
main = do
  args <- getArgs
  case bodyOption args of
    Left msg -> hPutStrLn stderr ("weft-pong: " ++ msg) >> exitFailure
    Right (bytes, rest) -> withArgs rest $
      serverMain "PORT [--manager weft|ghc] [--idle-timeout SECONDS] [--min-receive BYTES] [--max-clients N] [--evict none|stalled|stalled-then-idle] [--body-bytes N]" 0 60000000
        (Admit W.EvictStalledThenIdle tooManyClientsResponse) (\_ -> Just (pongServerWith (pongResponseOf bytes)))

-- | Take @--body-bytes N@ (default 4) out of the arguments; the rest are
-- 'serverMain's.
bodyOption :: [String] -> Either String (Int, [String])
bodyOption = go 4 []
  where
    go n acc [] = Right (n, reverse acc)
    go _ acc ("--body-bytes" : v : rest) = case reads v of
      [(k, "")] | k >= 0 -> go k acc rest
      _ -> Left ("bad --body-bytes " ++ v)
    go n acc (a : rest) = go n (a : acc) rest
