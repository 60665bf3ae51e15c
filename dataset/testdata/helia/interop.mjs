// Helia (JavaScript IPFS, @helia/utils + @helia/unixfs + @helia/block-brokers) side of dataset/helia_test.go. It dials the Tenzro
// node at TENZRO_PEER over libp2p (TCP, Noise, Yamux), fetches GET_CID over
// bitswap into OUT_FILE, adds ADD_FILE (Helia's default UnixFS layout: CIDv1,
// raw leaves) and keeps serving its blocks until stdin closes. One JSON
// object per line on stdout.
import { readFile, writeFile } from 'node:fs/promises'
import { Helia } from '@helia/utils'
import { MemoryBlockstore } from 'blockstore-core'
import { MemoryDatastore } from 'datastore-core'
import { unixfs } from '@helia/unixfs'
import { bitswap } from '@helia/block-brokers'
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { multiaddr } from '@multiformats/multiaddr'
import { CID } from 'multiformats/cid'

// Node 20 lacks Promise.withResolvers (Node 22 has it); some pinned
// dependencies call it at run time, so supply the standard definition.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function () {
    let resolve, reject
    const promise = new Promise((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}

const say = (o) => process.stdout.write(JSON.stringify(o) + '\n')

const libp2p = await createLibp2p({
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  peerDiscovery: [],
  services: { identify: identify() }
})
// Helia's own class (helia's createHelia adds WebRTC, whose native module
// needs a build step): in-memory stores, bitswap only, no routers.
const helia = new Helia({
  libp2p,
  blockstore: new MemoryBlockstore(),
  datastore: new MemoryDatastore(),
  blockBrokers: [bitswap()],
  routers: []
})
await helia.start()
const fs = unixfs(helia)
say({ listen: libp2p.getMultiaddrs().map((a) => a.toString()) })

await libp2p.dial(multiaddr(process.env.TENZRO_PEER))
say({ dialed: process.env.TENZRO_PEER })

const chunks = []
let n = 0
for await (const c of fs.cat(CID.parse(process.env.GET_CID), { signal: AbortSignal.timeout(120000) })) {
  chunks.push(c)
  n += c.length
}
await writeFile(process.env.OUT_FILE, Buffer.concat(chunks))
say({ got: n })

const added = await fs.addBytes(await readFile(process.env.ADD_FILE))
say({ added: added.toString() })

process.stdin.resume()
process.stdin.on('end', async () => {
  await helia.stop()
  process.exit(0)
})
