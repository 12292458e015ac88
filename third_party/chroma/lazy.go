package chroma

import "sync"

// xmode's patch: the maps below were built when the package was
// initialised, which every program linking chroma paid for at start-up
// (11 KB) whether or not it ever lexed; they are built on first use.
var lazyMaps struct {
	once                    sync.Once
	tokenTypeMap            map[TokenType]string
	tokenTypeNameToValueMap map[string]TokenType
	emitterTemplates        map[string]SerialisableEmitter
	mutatorTemplates        map[string]SerialisableMutator
}

func buildLazyMaps() {
	lazyMaps.tokenTypeMap = newTokenTypeMap()
	lazyMaps.tokenTypeNameToValueMap = newTokenTypeNameToValueMap()
	lazyMaps.emitterTemplates = newEmitterTemplates()
	lazyMaps.mutatorTemplates = newMutatorTemplates()
}

func tokenTypeMap() map[TokenType]string {
	lazyMaps.once.Do(buildLazyMaps)
	return lazyMaps.tokenTypeMap
}

func tokenTypeNameToValueMap() map[string]TokenType {
	lazyMaps.once.Do(buildLazyMaps)
	return lazyMaps.tokenTypeNameToValueMap
}

func emitterTemplates() map[string]SerialisableEmitter {
	lazyMaps.once.Do(buildLazyMaps)
	return lazyMaps.emitterTemplates
}

func mutatorTemplates() map[string]SerialisableMutator {
	lazyMaps.once.Do(buildLazyMaps)
	return lazyMaps.mutatorTemplates
}
