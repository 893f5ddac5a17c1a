-- | SimpleServer (Mio §3.1) with the I/O manager chosen on the command line.
module Main (main) where

import Example.Serve
import Example.Servers

main :: IO ()
main = serverMain "PORT REQ_BYTES REPLY_BYTES [--manager weft|ghc] [--idle-timeout SECONDS] [--max-clients N] [--evict none|stalled|stalled-then-idle]" 2 0 plainAdmit setup
  where
    setup [req, reply]
      | [(q, "")] <- reads req, [(r, "")] <- reads reply, q > 0, r > 0 =
          Just (simpleServer q (simpleReply r))
    setup _ = Nothing
